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

import os
import shutil
import warnings

import torch
import torch.utils.data

from . import _state
from ._npy import list_batches
from ._state import STATE_KEYS
from .loader import GpuLoader, link_folder
from .mount import open_source

__all__ = ["BatchDataset", "STATE_KEYS"]

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

    On another world (elastic resume: a node lost, or added): the state
    also says what the whole job consumed of the epoch ("global": seed,
    epoch, samples consumed, world, global batch, split, ranks a node).
    Mount with batchfs.Mount(..., resume=state): the mount then serves
    the rest of that epoch over the new world (fewer batches: len(ds)
    says how many), and load_state_dict starts there, so that over both
    runs every sample of the epoch is served once (but the last few that
    do not divide by the new world); later epochs are whole on the new
    world.  The batch size may change too.  A mount of another world not
    made for the state is refused, saying so.

    len(ds) is the number of batches of the epoch set (an epoch that
    resumes part way has fewer).  Iterating again starts
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
        return _state.epoch_batches(self.info, self.epoch)

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

    def _rank(self):
        base = os.path.basename(os.path.normpath(self.source.base))
        if base.startswith("rank-") and base[5:].isdigit():
            return int(base[5:])
        return self.info.get("rank")

    def state_dict(self):
        """Where iteration stands: the epoch and the batches of it taken
        so far; what the whole job consumed of the epoch ("global", see
        batchfs._state); and the mount's settings that the order and
        bytes depend on ("mount"), which load_state_dict compares (a
        plain dict; save it with the model's)."""
        return _state.make_state(self.info, self._rank(), self.epoch,
                                 self._pos)

    def load_state_dict(self, state, allow=()):
        """Resume where `state` stands.

        On a mount of the same settings: batch state["batch"] of
        state["epoch"].  On a mount made with batchfs.Mount(...,
        resume=state), of another world, batch size or split: the first
        batch of the rest of that epoch.  Refuses (ValueError) a state of
        another mount, naming each setting that differs (batch size, seed,
        epochs, rank, world, augmentation, sizes, dtype, layout, mean/std,
        drop_remainder, on_error, the shuffle block, the source and its
        shards and samples, ...), and a state that stopped part way
        through an epoch on another world when this mount was not made
        for it (saying how to mount).  ``allow`` names settings that may
        differ (e.g. allow=("source",) for the same shards moved
        elsewhere); that is on the caller.  epoch and batch must be
        integers."""
        epoch, k = _state.position(self.info, self._rank(), state, allow)
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
