# SPDX-License-Identifier: MIT
"""PyTorch glue for :func:`stalloc.enable` (internal).

:class:`StepMarkers` marks an iteration at each step of the lead optimizer
(the first one that steps), so that ``auto`` mode finds the training step
without an edit to the loop: through torch's global optimizer step pre-hook
(``torch.optim.optimizer.register_optimizer_step_pre_hook``, torch 2.0 and
later), else by wrapping the ``step`` of every ``torch.optim.Optimizer``
class, those defined later too (torch 1.13).  A step called from inside
another (a subclass's ``step`` calling ``super().step()``) marks once.

:class:`CudaStats` answers ``torch.cuda``'s memory statistics from
stalloc's (under a pluggable allocator torch's own raise).

Both only check in their constructor and only change torch in
``install()``, which cannot fail: enable() constructs them before it
changes anything.
"""
import functools
import threading
import weakref


class StepMarkers:
    """Iteration markers at optimizer steps.

    @mark: called at each step of the lead optimizer; it returns False once
    the user marks iterations himself, and the markers stand down.
    """

    def __init__(self, torch, mark):
        optim = getattr(torch, "optim", None)
        self._optimizer = getattr(optim, "Optimizer", None)
        module = getattr(optim, "optimizer", None)
        self._register = getattr(module,
                                 "register_optimizer_step_pre_hook", None)
        self._mark = mark
        self._lead = None
        self._done = False
        self._local = threading.local()
        self.how = ("register_optimizer_step_pre_hook" if self._register
                    else "Optimizer.step wrappers" if self._optimizer
                    else None)
        self.handle = None

    def on_step(self, optimizer):
        """One optimizer step begins: mark it if it is the lead's."""
        if self._done:
            return
        lead = self._lead() if self._lead is not None else None
        if lead is None:
            # the first optimizer to step leads; another takes over if it
            # is gone (a new optimizer for a new phase)
            self._lead = weakref.ref(optimizer)
            lead = optimizer
        if lead is optimizer and not self._mark():
            self._done = True

    def install(self):
        if self._register is not None:
            self.handle = self._register(
                lambda opt, args, kwargs: self.on_step(opt))
        elif self._optimizer is not None:
            self._wrap_tree(self._optimizer)
            self._wrap_future(self._optimizer)

    def _wrap(self, cls):
        step = cls.__dict__.get("step")
        if step is None or getattr(step, "_stalloc_step", False):
            return
        local = self._local

        @functools.wraps(step)
        def marked_step(opt, *args, **kwargs):
            depth = getattr(local, "depth", 0)
            if not depth:
                self.on_step(opt)
            local.depth = depth + 1
            try:
                return step(opt, *args, **kwargs)
            finally:
                local.depth = depth

        marked_step._stalloc_step = True
        cls.step = marked_step

    def _wrap_tree(self, cls):
        self._wrap(cls)
        for sub in cls.__subclasses__():
            self._wrap_tree(sub)

    def _wrap_future(self, base):
        """Wrap the step of Optimizer classes defined from now on."""
        markers = self
        old = base.__dict__.get("__init_subclass__")

        def __init_subclass__(cls, **kwargs):
            if old is not None:
                old.__func__(cls, **kwargs)
            else:
                super(base, cls).__init_subclass__(**kwargs)
            markers._wrap(cls)

        base.__init_subclass__ = classmethod(__init_subclass__)


# torch.cuda's memory statistics functions and what answers them; each is
# replaced in torch.cuda and in torch.cuda.memory where torch has it.
_STATS = ("memory_stats", "memory_stats_as_nested_dict", "memory_allocated",
          "max_memory_allocated", "memory_reserved", "max_memory_reserved",
          "memory_cached", "max_memory_cached", "reset_peak_memory_stats",
          "reset_max_memory_allocated", "reset_max_memory_cached",
          "reset_accumulated_memory_stats", "memory_summary")


def _nested(flat):
    out = {}
    for key, value in flat.items():
        node = out
        parts = key.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = value
    return out


class CudaStats:
    """torch.cuda's memory statistics answered by the stalloc module @sa."""

    def __init__(self, torch, sa):
        self._torch = torch
        self._sa = sa
        self._spaces = [m for m in (getattr(torch, "cuda", None),
                                    getattr(getattr(torch, "cuda", None),
                                            "memory", None))
                        if m is not None]
        self.replaced = []

    def device(self, device=None):
        """torch's device argument (None, int, "cuda:N", torch.device) as
        an index; None is the current device once CUDA is initialised."""
        cuda = self._torch.cuda
        if device is None or device == "cuda":
            return cuda.current_device() if cuda.is_initialized() else 0
        if isinstance(device, int):
            return device
        if isinstance(device, str):
            if device.startswith("cuda:") and device[5:].isdigit():
                return int(device[5:])
            raise ValueError("device %r: want an int, \"cuda\", "
                             "\"cuda:N\" or a torch.device" % (device,))
        index = getattr(device, "index", None)
        if getattr(device, "type", "cuda") != "cuda":
            raise ValueError("device %r is not a CUDA device" % (device,))
        return self.device(index)

    def functions(self):
        """name -> replacement, one for each of _STATS."""
        sa, dev = self._sa, self.device

        def stat(key):
            return lambda device=None: sa.memory_stats(dev(device))[key]

        def summary(device=None, abbreviated=False):
            return sa.memory_summary(dev(device))

        fns = {
            "memory_stats": lambda device=None: sa.memory_stats(dev(device)),
            "memory_stats_as_nested_dict": lambda device=None: _nested(
                sa.memory_stats(dev(device))),
            "memory_allocated": stat("allocated_bytes.all.current"),
            "max_memory_allocated": stat("allocated_bytes.all.peak"),
            "memory_reserved": stat("reserved_bytes.all.current"),
            "max_memory_reserved": stat("reserved_bytes.all.peak"),
            "memory_cached": stat("reserved_bytes.all.current"),
            "max_memory_cached": stat("reserved_bytes.all.peak"),
            "reset_accumulated_memory_stats": lambda device=None:
                sa.reset_accumulated_memory_stats(dev(device)),
            "memory_summary": summary,
        }
        for name in ("reset_peak_memory_stats", "reset_max_memory_allocated",
                     "reset_max_memory_cached"):
            fns[name] = lambda device=None: sa.reset_peak_memory_stats(
                dev(device))
        for name, fn in fns.items():
            fn.__name__ = name
            fn.__doc__ = ("torch.cuda.%s, answered by stalloc "
                          "(stalloc.memory_stats)" % name)
        return fns

    def install(self):
        fns = self.functions()
        for space in self._spaces:
            for name in _STATS:
                if hasattr(space, name):
                    setattr(space, name, fns[name])
                    self.replaced.append("%s.%s" % (space.__name__, name))
