"""A Lightning callback that runs a :class:`nngauge.training.Tracker` after training steps
and at the end of training epochs.

This module imports without Lightning; ``GaugeCallback`` is built on first access and raises
:class:`nngauge.MissingDependencyError` naming ``pip install 'nngauge[lightning]'`` when
Lightning is not installed.

Example:
    >>> from nngauge.integrations.lightning import GaugeCallback
    >>> callback = GaugeCallback(every=10)
    >>> callback.tracker.schedule
    Schedule(every 10 steps)
"""

from __future__ import annotations

from typing import Any

from nngauge.integrations._lazy import built_on_access

__all__ = ["GaugeCallback"]


def _build():
    from nngauge.errors import require_extra

    require_extra("lightning", "lightning", "nngauge.integrations.lightning.GaugeCallback")
    from lightning.pytorch import Callback

    from nngauge.training import Tracker

    class GaugeCallback(Callback):
        """Measure the LightningModule on the tracker's schedule.

        After each training batch, calls ``tracker.step(pl_module, batch,
        step=trainer.global_step - 1)`` (the index of the optimizer step just taken; gradients
        are still in ``.grad``); at the end of each training epoch, ``tracker.epoch_end(
        pl_module, epoch=trainer.current_epoch, step=trainer.global_step - 1)``, which
        measures (on the epoch's last batch, or the tracker's ``data``) only for
        ``schedule="epoch"``. Rows are in ``callback.tracker.history``; with ``log=True``
        they are also passed to ``pl_module.log_dict`` (to the trainer's logger).

        Args:
            tracker: a :class:`~nngauge.training.Tracker`; or build one from the keyword
                arguments (``measures``, ``every``, ``schedule``, ``sinks``, ``data``,
                ``probe_data``, ``generator``, ``options``, ``keep_weights``).
            log: also log the values through Lightning (default False).
        """

        def __init__(self, tracker: Any = None, *, log: bool = False, **tracker_options: Any):
            super().__init__()
            self.tracker = tracker if tracker is not None else Tracker(**tracker_options)
            self.log = log

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            row = self.tracker.step(pl_module, batch, step=max(trainer.global_step - 1, 0))
            self._log(pl_module, row, on_step=True)

        def on_train_epoch_end(self, trainer, pl_module) -> None:
            row = self.tracker.epoch_end(pl_module, epoch=trainer.current_epoch,
                                         step=max(trainer.global_step - 1, 0))
            self._log(pl_module, row, on_step=False)

        def _log(self, pl_module, row, *, on_step: bool) -> None:
            if row is not None and self.log:
                pl_module.log_dict({f"nngauge/{k}": v for k, v in row.items()
                                    if k not in ("step", "epoch")},
                                   on_step=on_step, on_epoch=not on_step)

        def on_train_end(self, trainer, pl_module) -> None:
            self.tracker.close()

    return GaugeCallback


__getattr__ = built_on_access(__name__, {"GaugeCallback": _build})
