"""batchfs._state: where a run stands in an epoch, in terms of the whole
job, and where a mount resumes from it (batchfs.torch.BatchDataset,
batchfs.tf and batchfs.jax share it).

A state is a plain dict:

    {"epoch": e, "batch": k,          # this rank took batches 0..k-1 of e
     "batches": n,                    # batches epoch e has on its mount
     "fingerprint": ..., "mount": {...dataset.json's settings...},
     "global": {"seed": ..., "epoch": e, "world": W, "global_batch": W * B,
                "split": "samples" | "shards", "node_ranks": K,
                "shuffle_block": ..., "samples_consumed": C, "complete": bool,
                "runs": [{"samples": C_i, "world": W_i, "split": ...,
                          "node_ranks": K_i}, ...]}}

"global" says what the whole job consumed of epoch e: every rank took as
many batches (data-parallel training steps in lockstep), so the job
consumed W * min(k * B, samples a rank) samples, laid out as the mount's
split lays them; "runs" are the runs of the job that served part of the
epoch, oldest first (more than one when the mount itself resumed the
epoch).  `batchfs mount --resume E:C@W[/K]+...` (resume_option) serves the
rest of that epoch over another world, and `position` says where a mount
stands for a state: the same mount (or one of the same world and split)
goes on at batch k; a mount made with resume=state starts the rest at
batch 0; anything else is refused with what to do.
"""

import json
import operator

__all__ = ["STATE_KEYS", "ELASTIC_KEYS", "epoch_batches", "epoch_samples",
           "make_state", "resume_option", "position", "order_settings"]

# dataset.json's settings that the order and the bytes of the batches
# depend on: a state carries them (with the rank served), and loading a
# state refuses a mount where one differs -- but for ELASTIC_KEYS, which
# an elastic resume (another world, batch or split) changes.  (Not
# "ranks": which ranks one daemon serves changes no rank's bytes.)
STATE_KEYS = ("source", "format", "shards", "samples", "samples_per_epoch",
              "batch_size", "batches_per_epoch", "last_batch_size",
              "drop_remainder", "epochs", "shape", "dtype", "layout",
              "resize_mode", "crop_from", "resize_filter", "resize",
              "decode", "augment", "rrc", "size_schedule", "cached_shape",
              "mean", "std", "normalization", "label_offset", "label_key",
              "image_key", "classes", "shuffle", "seed", "shuffle_block",
              "world", "split", "node_ranks", "on_error", "max_pixels",
              "fingerprint")
ELASTIC_KEYS = ("world", "rank", "split", "node_ranks", "batch_size",
                "shape", "samples_per_epoch", "batches_per_epoch",
                "last_batch_size")

# What a mount made before these settings existed had.
_ABSENT = {"split": "samples", "node_ranks": None}


def _integer(state, key):
    v = state[key]
    if isinstance(v, bool):
        v = None
    try:
        return operator.index(v)
    except TypeError:
        raise ValueError("state[%r] is %r: it must be an integer (a "
                         "state_dict() writes one)" % (key, v)) from None


def _norm(v):
    """A value as JSON has it (tuples are lists), for comparing."""
    return json.loads(json.dumps(v))


def _resume_of(info, epoch):
    """The runs the mount's resumed epoch `epoch` started after, or []."""
    r = info.get("resume")
    if r and int(r["epoch"]) == int(epoch):
        return [_run(x) for x in r["runs"]]
    return []


def _run(x):
    out = {"samples": int(x["samples"]), "world": int(x["world"]),
           "split": x.get("split", "samples")}
    if out["split"] == "shards":
        out["node_ranks"] = int(x["node_ranks"])
    return out


def epoch_batches(info, epoch):
    """Batches epoch `epoch` has on the mount of dataset.json `info` (the
    resumed one has fewer)."""
    r = info.get("resume")
    if r and int(r["epoch"]) == int(epoch):
        return int(r["batches"])
    return int(info["batches_per_epoch"])


def epoch_samples(info, epoch):
    """Samples each rank serves in epoch `epoch` (after drop_remainder)."""
    r = info.get("resume")
    if r and int(r["epoch"]) == int(epoch):
        return int(r["samples_per_epoch"])
    return int(info["samples_per_epoch"])


def order_settings(info):
    """The settings of `info` that say how ranks divide an epoch."""
    return {"world": int(info.get("world") or 1),
            "split": info.get("split", "samples"),
            "node_ranks": info.get("node_ranks"),
            "shuffle_block": info.get("shuffle_block")}


def mount_settings(info, rank):
    """STATE_KEYS of dataset.json `info`, the rank served, and the
    resume the mount was made with (its epoch and runs)."""
    out = {k: info.get(k) for k in STATE_KEYS}
    out["rank"] = rank
    r = info.get("resume")
    out["resume"] = None if not r else {
        "epoch": int(r["epoch"]), "runs": [_run(x) for x in r["runs"]]}
    return out


def make_state(info, rank, epoch, batch):
    """The state of a rank of the mount of `info` that took `batch`
    batches of `epoch` (see the module doc)."""
    epoch, batch = int(epoch), int(batch)
    o = order_settings(info)
    b = int(info["batch_size"])
    nb = epoch_batches(info, epoch)
    per = min(batch * b, epoch_samples(info, epoch))
    complete = batch >= nb
    runs = _resume_of(info, epoch)
    if per > 0 and not complete:
        run = {"samples": o["world"] * per, "world": o["world"],
               "split": o["split"]}
        if o["split"] == "shards":
            run["node_ranks"] = int(o["node_ranks"])
        runs.append(run)
    total = sum(r["samples"] for r in runs)
    return {"epoch": epoch, "batch": batch, "batches": nb,
            "fingerprint": info.get("fingerprint"),
            "mount": mount_settings(info, rank),
            "global": {"seed": info.get("seed"), "epoch": epoch,
                       "world": o["world"], "global_batch": o["world"] * b,
                       "split": o["split"], "node_ranks": o["node_ranks"],
                       "shuffle_block": o["shuffle_block"],
                       "samples_consumed": total, "complete": complete,
                       "runs": [] if complete else runs}}


def resume_option(state):
    """The `batchfs mount --resume` value that serves the rest of the
    state's epoch ("3:1024@4/2+512@2"), or None when there is no rest to
    serve this way (the epoch not started, or complete)."""
    if isinstance(state, str):
        return state
    g = state.get("global") if isinstance(state, dict) else None
    if g is None:
        raise ValueError("the state has no \"global\" part: it was saved by "
                         "a batchfs before elastic resume; load it on a "
                         "mount of the same world (no resume= needed)")
    if g.get("complete") or not g.get("runs"):
        return None
    parts = []
    for r in g["runs"]:
        p = "%d@%d" % (int(r["samples"]), int(r["world"]))
        if r.get("split") == "shards":
            p += "/%d" % int(r["node_ranks"])
        parts.append(p)
    return "%d:%s" % (int(g["epoch"]), "+".join(parts))


def _describe(g, n):
    runs = g.get("runs") or []
    w = ", ".join("world %d%s" % (r["world"], " (shards, %d ranks a node)" %
                                  r["node_ranks"] if r.get("split") ==
                                  "shards" else "") for r in runs)
    return "%d of its %d samples consumed by a job of %s" % (
        int(g.get("samples_consumed", 0)), int(n), w or "world %s" %
        g.get("world"))


def position(info, rank, state, allow=()):
    """Where a loader of the mount of `info` (serving `rank`) resumes
    `state`: (epoch, batch to start at).  Raises ValueError when the
    state is of another mount (naming each setting that differs) or
    stopped part way through an epoch this mount was not made to finish
    (saying how to mount for it).  `allow` names settings that may
    differ; that is on the caller."""
    epoch = _integer(state, "epoch")
    k = _integer(state, "batch")
    allow = set(allow)
    known = set(STATE_KEYS) | {"rank", "resume"}
    unknown = allow - known
    if unknown:
        raise ValueError("allow=%r: not a mount setting (they are %s)" %
                         (sorted(unknown), ", ".join(sorted(known))))
    here = mount_settings(info, rank)
    saved = state.get("mount")
    diff, elastic = [], []
    if saved is not None:
        if not isinstance(saved, dict):
            raise ValueError('the state\'s "mount" is %r, not a dict' %
                             (saved,))
        for key in sorted(set(saved) | set(here)):
            if key in allow:
                continue
            a, b = saved.get(key, _ABSENT.get(key)), here.get(key)
            if key == "shuffle_block" and key not in saved:
                # saved before block orders: a global shuffle
                a = "global" if saved.get("shuffle") else None
            if _norm(a) == _norm(b):
                continue
            text = "%s %s (this mount: %s)" % (key, json.dumps(a),
                                               json.dumps(b))
            if key == "shape" and not (a and b and _norm(a[1:]) ==
                                       _norm(b[1:])):
                diff.append(text)  # the batch alone may change
            elif key in ELASTIC_KEYS or key == "resume":
                elastic.append((key, text))
            else:
                diff.append(text)
        if [name for name, _ in elastic] == ["rank"]:
            # the same world and layout: another rank's position is not
            # this rank's (save each rank's state, or load its own)
            diff.append(elastic[0][1])
        elif diff:  # refused: name every difference, in order
            diff = sorted(diff + [t for _, t in elastic])
    else:  # a state saved before the settings were
        fp = state.get("fingerprint")
        if fp is not None and fp != info.get("fingerprint") \
                and "fingerprint" not in allow:
            diff.append("fingerprint %s (this mount: %s)" %
                        (fp, info.get("fingerprint")))
        nb = state.get("batches")
        if nb is not None and nb != int(info["batches_per_epoch"]) and \
                "batches_per_epoch" not in allow:
            diff.append("batches %s (this mount: %s)" %
                        (nb, info["batches_per_epoch"]))
    if diff:
        raise ValueError(
            "the state is of another mount; resumed here, the run would "
            "see other samples or bytes.  It differs in: %s.  Mount with "
            "the state's settings (or pass allow=(...) for a difference "
            "you mean)" % "; ".join(diff))
    epochs = int(info["epochs"])
    if not 0 <= epoch < epochs:
        raise IndexError("epoch %d: the mount has epochs 0..%d" %
                         (epoch, epochs - 1))
    g = state.get("global")
    mine = _resume_of(info, epoch)
    nb_here = epoch_batches(info, epoch)
    if not elastic:
        # the same layout: batch k of the same epoch
        if not 0 <= k <= nb_here:
            raise ValueError("batch %d: epoch %d has %d batches" %
                             (k, epoch, nb_here))
        return epoch, k
    if g is None:
        raise ValueError(
            "the state differs from this mount in %s, and it was saved by a "
            "batchfs before elastic resume: load it on a mount of the same "
            "world, batch and split" % ", ".join(n for n, _ in elastic))
    if g.get("complete"):
        return epoch, nb_here  # nothing left of it: the next epoch is next
    runs = [_run(r) for r in g.get("runs") or []]
    if not runs and not mine:
        return epoch, 0  # not started: the epoch whole, on this world
    if runs == mine:
        return epoch, 0  # the mount serves what is left of it
    n = int(info["samples"])
    opt = resume_option(state)
    if mine:
        made = "it was made to resume epoch %d after %s" % (
            epoch, _describe({"runs": mine, "samples_consumed": sum(
                r["samples"] for r in mine)}, n))
    else:
        made = "it serves epoch %d whole" % epoch
    raise ValueError(
        "the state stopped part way through epoch %d (%s), and this mount "
        "(world %s, split %s) was not made to serve the rest: %s.  Mount "
        "with batchfs.Mount(..., resume=state) (the mount option --resume "
        "%s), then load the state" % (
            epoch, _describe(g, n), info.get("world"),
            info.get("split", "samples"), made, opt))
