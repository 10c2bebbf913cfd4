"""batchfs.torch: a PyTorch IterableDataset over a batchfs mount.

    import batchfs, batchfs.torch, torch
    with batchfs.Mount("/data/train", batch=64, size=(224, 224),
                       dtype="uint8", shuffle=1, epochs=90,
                       rank="auto", world="auto") as m:
        ds = batchfs.torch.BatchDataset(m, device="cuda:0", normalize=True)
        loader = torch.utils.data.DataLoader(ds, batch_size=None)
        for epoch in range(ds.epochs):
            ds.set_epoch(epoch)
            for images, labels in loader:
                ...

PyTorch is imported when this module is: `import batchfs` alone needs only
NumPy.
"""

import json
import operator
import os
import shutil
import warnings

import torch
import torch.utils.data

from ._npy import list_batches
from .loader import GpuLoader, link_folder
from .mount import open_source

__all__ = ["BatchDataset", "STATE_KEYS"]

# dataset.json's settings that the order and the bytes of the batches
# depend on: a state_dict carries them (with the rank served), and
# load_state_dict refuses a mount where one differs.  (Not "ranks": which
# ranks one daemon serves changes no rank's bytes.)
STATE_KEYS = ("source", "format", "shards", "samples", "samples_per_epoch",
              "batch_size", "batches_per_epoch", "last_batch_size",
              "drop_remainder", "epochs", "shape", "dtype", "layout",
              "resize_mode", "crop_from", "resize_filter", "resize",
              "decode", "augment", "rrc", "size_schedule", "cached_shape",
              "mean", "std", "normalization", "label_offset", "label_key",
              "image_key", "classes", "shuffle", "seed", "world",
              "on_error", "max_pixels", "fingerprint")


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


class BatchDataset(torch.utils.data.IterableDataset):
    """The batches of one epoch of a batchfs mount, as (images, labels).

    mount_or_path  a batchfs.Mount, a mount root, or MNT/rank-R of a mount
                   of several ranks (a root of several takes $RANK)
    epoch          the epoch to serve; set_epoch(e) changes it
    device         None or "cpu": CPU tensors (sharing memory with the
                   NumPy arrays read, no copy); "cuda:N" (or N): through
                   batchfs.GpuLoader's pinned, asynchronous uploads, each
                   batch already queued behind its copy on the current
                   stream and valid until the next one is taken
    normalize      as GpuLoader: False, the batch as stored (the mount's
                   dtype and layout); True, float32 (x/255 for uint8, then
                   (x - mean)/std with mean=, std=); "imagenet"
    **loader       other GpuLoader options (depth, layout, mean, std, ...)

    Use it with DataLoader(ds, batch_size=None): the mount makes whole
    batches, so there is nothing to collate.  num_workers=0 is all it
    needs: the mount's daemon already decodes, resizes and reads ahead
    with its own threads, outside Python, and reading a batch file is one
    copy out of the page cache or the daemon's memory.  Worker processes
    would only add a second copy of every batch (pickled across a pipe or
    shared memory) and processes that each import torch.  With workers
    anyway, worker w of n reads batches w, w+n, ... (the DataLoader gives
    them back in order), but state_dict() then knows only the batches this
    process iterated itself.

    Every batch of every epoch has a fixed name and fixed bytes, so a run
    resumes exactly: state_dict() after k batches of an epoch is
    {"epoch": e, "batch": k, ...}, and after load_state_dict(state)
    iteration yields batches k, k+1, ... of epoch e, byte for byte those an
    uninterrupted run would have seen.  set_epoch(e) for the epoch being
    resumed keeps the position; any other epoch starts at batch 0.  The
    state carries the mount's settings; load_state_dict refuses a state of
    another mount, naming each setting that differs.

    len(ds) is the number of batches in an epoch.  Iterating again starts
    the epoch over (unless a resume position is pending): call
    set_epoch(e) before each epoch, as with DistributedSampler.  An epoch
    iterated again after its end without set_epoch warns once
    (UserWarning), since it repeats the same samples in the same order.
    """

    def __init__(self, mount_or_path, epoch=0, device=None, normalize=False,
                 **loader):
        super().__init__()
        self.source = open_source(mount_or_path)
        self.info = self.source.info
        self.epochs = self.source.epochs
        self.device = device
        self.normalize = normalize
        self.loader_options = loader
        self._gpu = device is not None and not (
            isinstance(device, str) and device.lower() == "cpu")
        self.epoch = 0
        self._start = 0  # where the next iteration starts
        self._pos = 0    # batches of the epoch taken so far
        self._ended = None   # the epoch last iterated to its end
        self._warned = False
        self.set_epoch(epoch)

    def __len__(self):
        return self.source.batches

    def set_epoch(self, epoch):
        """Serve epoch `epoch` from its first batch (or, for the epoch a
        loaded state is in, from that state's batch)."""
        epoch = int(epoch)
        self.source.epoch_dir(epoch)  # IndexError when out of range
        self._ended = None  # chosen: iterating it again is meant
        if epoch != self.epoch:
            self.epoch = epoch
            self._start = 0
            self._pos = 0

    def _mount_state(self):
        """What the order and the bytes of this dataset's batches depend
        on: dataset.json's settings (STATE_KEYS) and the rank served."""
        out = {k: self.info.get(k) for k in STATE_KEYS}
        out["rank"] = self._rank()
        return out

    def _rank(self):
        base = os.path.basename(os.path.normpath(self.source.base))
        if base.startswith("rank-") and base[5:].isdigit():
            return int(base[5:])
        return self.info.get("rank")

    def state_dict(self):
        """Where iteration stands: the epoch and the batches of it taken
        so far, and the mount's settings that the order and bytes depend
        on (under "mount"), which load_state_dict compares (a plain dict;
        save it with the model's)."""
        return {"epoch": self.epoch, "batch": self._pos,
                "batches": len(self), "fingerprint": self.info.get(
                    "fingerprint"), "mount": self._mount_state()}

    def load_state_dict(self, state, allow=()):
        """Resume at state["batch"] of state["epoch"].

        Refuses (ValueError) a state of another mount, naming each setting
        that differs (batch size, seed, epochs, rank, world, augmentation,
        sizes, dtype, layout, mean/std, drop_remainder, on_error, the
        source and its shards and samples, ...): resumed there, the run
        would see other samples or other bytes.  ``allow`` names settings
        that may differ (e.g. allow=("source",) for the same shards moved
        elsewhere); that is on the caller.  epoch and batch must be
        integers."""
        epoch = _integer(state, "epoch")
        k = _integer(state, "batch")
        allow = set(allow)
        unknown = allow - set(STATE_KEYS) - {"rank"}
        if unknown:
            raise ValueError("allow=%r: not a mount setting (they are %s)" %
                             (sorted(unknown),
                              ", ".join(sorted(STATE_KEYS + ("rank",)))))
        diff = []
        saved = state.get("mount")
        if saved is not None:
            if not isinstance(saved, dict):
                raise ValueError('the state\'s "mount" is %r, not a dict' %
                                 (saved,))
            here = self._mount_state()
            for key in sorted(set(saved) | set(here)):
                if key in allow:
                    continue
                a, b = saved.get(key), here.get(key)
                if _norm(a) != _norm(b):
                    diff.append("%s %s (this mount: %s)" % (
                        key, json.dumps(a), json.dumps(b)))
        else:  # a state saved before the settings were
            fp = state.get("fingerprint")
            if fp is not None and fp != self.info.get("fingerprint") \
                    and "fingerprint" not in allow:
                diff.append("fingerprint %s (this mount: %s)" %
                            (fp, self.info.get("fingerprint")))
            nb = state.get("batches")
            if nb is not None and nb != len(self) and \
                    "batches_per_epoch" not in allow:
                diff.append("batches %s (this mount: %d)" % (nb, len(self)))
        if diff:
            raise ValueError(
                "the state is of another mount; resumed here, the run would "
                "see other samples or bytes.  It differs in: %s.  Mount with "
                "the state's settings (or pass allow=(...) for a difference "
                "you mean)" % "; ".join(diff))
        if not 0 <= k <= len(self):
            raise ValueError("batch %d: an epoch has %d batches" %
                             (k, len(self)))
        self.source.epoch_dir(epoch)
        self.epoch = epoch
        self._start = k
        self._pos = k
        self._ended = None  # a position chosen: iterating from it is meant

    def _loader(self, folder, start):
        opts = dict(self.loader_options)
        if self._gpu:
            dev = self.device
            if isinstance(dev, str):
                dev = int(dev.split(":")[1]) if ":" in dev else 0
            opts.setdefault("output", "torch")
            return GpuLoader(folder, device=dev, normalize=self.normalize,
                             start=start, **opts)
        opts.setdefault("depth", 2)
        return GpuLoader(folder, device="cpu", normalize=self.normalize,
                         start=start, **opts)

    def __iter__(self):
        start, self._start = self._start, 0
        if start == 0 and self._ended == self.epoch and not self._warned:
            self._warned = True
            warnings.warn(
                "batchfs.torch.BatchDataset: epoch %d iterated again after "
                "its end, without set_epoch: the same samples in the same "
                "order.  Call ds.set_epoch(epoch) before each epoch, as with "
                "DistributedSampler (set_epoch(%d) if the same epoch is "
                "meant)" % (self.epoch, self.epoch), stacklevel=2)
        self._ended = None
        self._pos = start
        folder = self.source.epoch_dir(self.epoch)
        info = torch.utils.data.get_worker_info()
        links = None
        if info is not None and info.num_workers > 1:
            # this worker's batches start+id, start+id+n, ...: a folder of
            # links to just those, so nothing else is read
            files = list_batches(folder)[start:][info.id::info.num_workers]
            if not files:
                return
            links = link_folder(files)
            loader = self._loader(links, 0)
            first, step = start + info.id, info.num_workers
        else:
            loader = self._loader(folder, start)
            first, step = start, 1
        try:
            for i, (images, labels) in enumerate(loader):
                if not self._gpu:
                    images = torch.from_numpy(images)
                    labels = torch.from_numpy(labels)
                self._pos = first + i * step + 1
                yield images, labels
            self._ended = self.epoch
        finally:
            loader.close()
            if links is not None:
                shutil.rmtree(links, ignore_errors=True)
