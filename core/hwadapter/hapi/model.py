"""hw.Model: paddle.Model's high-level API (prepare, fit, evaluate, predict, save, load) over an nn.Layer.

Training runs one to_static train step per batch (forward, loss, backward, optimizer step and the metrics'
compute: one captured plan per batch shape, so a last partial batch gets a trace of its own), or eagerly with
Model(net, to_static=False)."""
from __future__ import annotations

import inspect
import logging
import numbers
import os

import numpy as np

from .. import jit, serialize
from ..api.errors import InvalidArgumentError
from ..api.shapes import show
from ..autograd import no_grad
from ..dispatch.tensor import Tensor
from ..io import DataLoader, Dataset
from ..metric import Metric
from ..ops import api as ops
from ..optimizer import Optimizer
from ..optimizer.lr import positive_int
from ..runtime.device import current
from ..tensor import to_tensor
from .progress import ProgressBar

__all__ = ["Model"]

log = logging.getLogger("hwadapter")
PARAMS, OPT = ".hwparams", ".hwopt"  # what save writes: the network's state and the optimizer's


def _as_list(x) -> list:
    return list(x) if isinstance(x, (list, tuple)) else [x]


def _count(name: str, value, default):
    """How many batch fields are inputs (or labels): an int, a list of specs (its length), or the default."""
    if value is None:
        return default
    if isinstance(value, (list, tuple)):
        return len(value)
    if isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 0:
        return int(value)
    raise InvalidArgumentError(f"Model: {name} must be None, a count or a list of input specs, not {show(value)}. "
                               f"Fix: leave it out (the network's forward arguments are the inputs, the rest of a "
                               f"batch the labels)", fix=f"leave {name} out")


def _forward_inputs(network) -> int:
    """The number of positional arguments the network's forward takes without defaults (at least 1)."""
    try:
        sig = inspect.signature(getattr(network, "forward", network))
    except (TypeError, ValueError):
        return 1
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    n = sum(1 for p in sig.parameters.values() if p.kind in kinds and p.default is inspect.Parameter.empty)
    return max(n, 1)


def _flag(name: str, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise InvalidArgumentError(f"Model: {name} must be True or False, not {show(value)}. Fix: pass {name}=True "
                                   f"or {name}=False", fix=f"pass a bool as {name}")
    return bool(value)


def _positive(what: str, name: str, value) -> int:
    return positive_int(f"Model.{what}", name, value)


class Model:
    """A network with its training set-up: `Model(net).prepare(optimizer, loss, metrics)`, then fit / evaluate /
    predict over a hw.io.Dataset or DataLoader, and save / load of the weights and the optimizer's state.

    A batch's first fields are the network's inputs (as many as its forward takes, or `inputs`), the rest its
    labels. `to_static=False` runs every step eagerly."""

    def __init__(self, network, inputs=None, labels=None, to_static: bool = True):
        if not callable(network) or not hasattr(network, "parameters"):
            raise InvalidArgumentError(f"Model: network is a {type(network).__name__}, not a layer. Fix: pass an "
                                       f"hw.nn.Layer (e.g. hw.nn.Sequential(...))", fix="pass an hw.nn.Layer")
        self.network = network
        self._n_inputs = _count("inputs", inputs, _forward_inputs(network))
        self._n_labels = _count("labels", labels, None)
        self._to_static = _flag("to_static", to_static)
        self._optimizer, self._loss, self._metrics = None, None, []
        self._steps: dict = {}  # kind -> the step function (a to_static function unless to_static=False)
        self.stop_training = False

    # --- set-up ---------------------------------------------------------------------------------------------------
    def prepare(self, optimizer=None, loss=None, metrics=None, amp_configs=None):
        """Set the optimizer (needed by fit), the loss (a layer or function of (outputs..., labels...)) and the
        metrics (a Metric or a list of them)."""
        if optimizer is not None and not isinstance(optimizer, Optimizer):
            raise InvalidArgumentError(f"Model.prepare: optimizer is a {type(optimizer).__name__}. Fix: pass e.g. "
                                       f"hw.optimizer.Adam(parameters=net.parameters())", fix="pass an Optimizer")
        if loss is not None and not callable(loss):
            raise InvalidArgumentError(f"Model.prepare: loss is a {type(loss).__name__}, not callable. Fix: pass "
                                       f"e.g. hw.nn.CrossEntropyLoss()", fix="pass a loss layer or function")
        metrics = [] if metrics is None else _as_list(metrics)
        for m in metrics:
            if not isinstance(m, Metric):
                raise InvalidArgumentError(f"Model.prepare: metric {show(m)} is not a hw.metric.Metric. Fix: pass "
                                           f"e.g. metrics=hw.metric.Accuracy()", fix="pass hw.metric.Metric objects")
        if amp_configs is not None:
            raise InvalidArgumentError("Model.prepare: amp_configs is not supported by hwadapter. Fix: leave it out",
                                       fix="leave amp_configs out")
        self._optimizer, self._loss, self._metrics = optimizer, loss, metrics
        self._steps.clear()

    def parameters(self) -> list:
        """The network's parameters."""
        return self.network.parameters()

    def _device(self):
        params = self.network.parameters()
        if params:
            dev = params[0].device
            return getattr(dev, "base", dev)
        return current()

    # --- one step ---------------------------------------------------------------------------------------------------
    def _split(self, batch: tuple, need_labels: bool = False) -> tuple[list, list]:
        n = self._n_inputs
        if len(batch) < n + need_labels:
            lack = ", and training needs labels after them: no label field" if need_labels else ""
            raise InvalidArgumentError(f"Model: a batch has {len(batch)} field(s), and the network takes {n} "
                                       f"input(s){lack}. Fix: give the dataset one field per input, then the labels",
                                       fix="give one field per input, then the labels")
        labels = batch[n:] if self._n_labels is None else batch[n:n + self._n_labels]
        return list(batch[:n]), list(labels)

    def _outputs(self, inputs: list) -> list:
        return _as_list(self.network(*inputs))

    def _loss_of(self, outputs: list, labels: list) -> Tensor:
        losses = _as_list(self._loss(*outputs, *labels))
        total = losses[0]
        for extra in losses[1:]:
            total = ops.add(total, extra)
        return total

    def _computed(self, outputs: list, labels: list) -> list:
        with no_grad():
            return [_as_list(m.compute(*outputs, *labels)) for m in self._metrics]

    def _train_step(self, *batch):
        inputs, labels = self._split(batch, need_labels=True)
        outputs = self._outputs(inputs)
        loss = self._loss_of(outputs, labels)
        loss.backward()
        self._optimizer.step()
        self._optimizer.clear_grad()
        return loss, self._computed(outputs, labels)

    def _accumulate_step(self, *batch):
        inputs, labels = self._split(batch, need_labels=True)
        outputs = self._outputs(inputs)
        loss = self._loss_of(outputs, labels)
        loss.backward()
        return loss, self._computed(outputs, labels)

    def _eval_step(self, *batch):
        inputs, labels = self._split(batch)
        outputs = self._outputs(inputs)
        loss = self._loss_of(outputs, labels) if self._loss is not None and labels else None
        return loss, self._computed(outputs, labels)

    def _predict_step(self, *batch):
        return self._outputs(list(batch[:self._n_inputs]))

    def _step(self, kind: str):
        fn = self._steps.get(kind)
        if fn is None:
            raw = {"train": self._train_step, "accumulate": self._accumulate_step, "eval": self._eval_step,
                   "predict": self._predict_step}[kind]
            fn = self._steps[kind] = jit.to_static(raw) if self._to_static else raw
        return fn

    def _tensors(self, what: str, batch) -> tuple:
        fields = _as_list(batch) if not isinstance(batch, Tensor) else [batch]
        dev = self._device()
        out = []
        for i, f in enumerate(fields):
            if isinstance(f, Tensor):
                out.append(f)
            elif isinstance(f, (np.ndarray, np.generic, numbers.Number, list)):
                out.append(to_tensor(f, device=dev))
            else:
                raise InvalidArgumentError(f"Model.{what}: batch field {i} is a {type(f).__name__}, not a tensor or "
                                           f"array. Fix: make the dataset return arrays or tensors",
                                           fix="return arrays or tensors from the dataset")
        return tuple(out)

    def _need(self, what: str, optimizer: bool) -> None:
        if (optimizer and self._optimizer is None) or self._loss is None:
            need = "an optimizer and a loss" if optimizer else "a loss"
            raise InvalidArgumentError(f"Model.{what} needs {need}. Fix: call model.prepare(optimizer, loss, "
                                       f"metrics) first", fix="call prepare(optimizer, loss, metrics) first")

    def _update_metrics(self, results: list) -> list:
        """Each metric's update() of one batch's compute() results."""
        return [m.update(*r) for m, r in zip(self._metrics, results)]

    def _so_far(self, values: dict) -> dict:
        """values with each metric's value over the batches so far."""
        for m in self._metrics:
            values.update(zip(m.name(), _as_list(m.accumulate())))
        return values

    def train_batch(self, inputs, labels=None, update: bool = True):
        """One train step on one batch (update=False: backward only, gradients add up); [loss] as numpy, and with
        metrics ([loss], [each metric's update()])."""
        self._need("train_batch", update)
        self.network.train()
        batch = self._tensors("train_batch", _as_list(inputs) + ([] if labels is None else _as_list(labels)))
        loss, results = self._step("train" if update else "accumulate")(*batch)
        batch_metrics = self._update_metrics(results)
        losses = [loss.numpy()]
        return (losses, batch_metrics) if self._metrics else losses

    # --- loops ------------------------------------------------------------------------------------------------------
    def _loader(self, what: str, data, batch_size, shuffle, drop_last):
        if isinstance(data, DataLoader):
            return data
        if isinstance(data, Dataset):
            return DataLoader(data, batch_size=batch_size, shuffle=shuffle, drop_last=drop_last,
                              device=self._device())
        raise InvalidArgumentError(f"Model.{what}: the data is a {type(data).__name__}, not a hw.io.Dataset or "
                                   f"DataLoader. Fix: wrap arrays in hw.io.TensorDataset([x, y])",
                                   fix="wrap arrays in hw.io.TensorDataset([x, y])")

    @staticmethod
    def _total(loader):
        try:
            return len(loader)
        except TypeError:
            return None

    def fit(self, train_data=None, eval_data=None, batch_size=32, epochs=1, eval_freq=1, log_freq=10,
            save_dir=None, save_freq=1, verbose=1, drop_last=False, shuffle=True, num_workers=0, callbacks=None,
            num_iters=None) -> dict:
        """Train for `epochs` over train_data (a Dataset, batched here, or a DataLoader, used as is), evaluating on
        eval_data every eval_freq epochs and saving to save_dir every save_freq epochs. Returns the history: per
        epoch, the mean loss ('loss'), each metric, and 'eval_'-prefixed ones. verbose: 0 silent, 1 a progress
        bar (plain lines every log_freq steps when not on a terminal), 2 one line per epoch; num_workers is
        accepted for paddle's signature (batches are made in this process)."""
        self._need("fit", True)
        if callbacks is not None:
            raise InvalidArgumentError("Model.fit: callbacks are not supported by hwadapter. Fix: leave them out, "
                                       "or loop over train_batch yourself", fix="leave callbacks out")
        epochs, eval_freq = _positive("fit", "epochs", epochs), _positive("fit", "eval_freq", eval_freq)
        save_freq, log_freq = _positive("fit", "save_freq", save_freq), _positive("fit", "log_freq", log_freq)
        num_iters = None if num_iters is None else _positive("fit", "num_iters", num_iters)
        verbose = self._verbose("fit", verbose)
        loader = self._loader("fit", train_data, batch_size, shuffle, drop_last)
        eval_loader = None if eval_data is None else self._loader("fit", eval_data, batch_size, False, False)
        history: dict = {}
        done = 0
        self.stop_training = False
        for epoch in range(epochs):
            self.network.train()
            for m in self._metrics:
                m.reset()
            bar = ProgressBar(f"Epoch {epoch + 1}/{epochs}", self._total(loader), verbose, log_freq)
            values = self._run(loader, "train", bar, "fit", None if num_iters is None else num_iters - done)
            bar.close(values)
            for k, v in values.items():
                history.setdefault(k, []).append(v)
            done += bar.step
            if eval_loader is not None and (epoch + 1) % eval_freq == 0:
                for k, v in self._evaluate(eval_loader, verbose, log_freq).items():
                    history.setdefault(f"eval_{k}", []).append(v)
            if save_dir is not None and (epoch + 1) % save_freq == 0:
                self.save(os.path.join(os.fspath(save_dir), str(epoch)))
            if self.stop_training or (num_iters is not None and done >= num_iters):
                break
        if save_dir is not None:
            self.save(os.path.join(os.fspath(save_dir), "final"))
        return history

    def _run(self, loader, kind: str, bar: ProgressBar, what: str, limit=None) -> dict:
        """One pass of `kind` steps over loader: the mean loss (by samples) and the metrics."""
        step = self._step(kind)
        total, seen = 0.0, 0
        values: dict = {}
        for i, batch in enumerate(loader, 1):
            tensors = self._tensors(what, batch)
            loss, results = step(*tensors)
            values = {}
            if loss is not None:
                n = int(tensors[0].shape[0]) if tensors[0].ndim else 1
                total, seen = total + float(loss) * n, seen + n
                values["loss"] = total / seen
            self._update_metrics(results)
            bar.update(i, self._so_far(values))
            if limit is not None and i >= limit:
                break
        return self._so_far(values)

    def _verbose(self, what: str, verbose) -> int:
        if verbose not in (0, 1, 2) or isinstance(verbose, bool):
            raise InvalidArgumentError(f"Model.{what}: verbose must be 0, 1 or 2, not {show(verbose)}. Fix: pass 0 "
                                       f"(silent), 1 (progress bar) or 2 (one line per epoch)", fix="pass 0, 1 or 2")
        return int(verbose)

    def _evaluate(self, loader, verbose: int, log_freq: int, num_samples=None) -> dict:
        self.network.eval()
        for m in self._metrics:
            m.reset()
        bar = ProgressBar("Eval", self._total(loader), verbose, log_freq)
        limit = None
        if num_samples is not None:
            limit = -(-_positive("evaluate", "num_samples", num_samples) // max(getattr(loader, "batch_size", 1), 1))
        with no_grad():
            values = self._run(loader, "eval", bar, "evaluate", limit)
        bar.close(values)
        return values

    def evaluate(self, eval_data, batch_size=32, log_freq=10, verbose=2, num_workers=0, callbacks=None,
                 num_samples=None) -> dict:
        """The mean loss ('loss', when prepared with one) and each metric over eval_data, in eval mode."""
        if self._loss is None and not self._metrics:
            raise InvalidArgumentError("Model.evaluate: nothing to evaluate (no loss and no metrics). Fix: call "
                                       "model.prepare(loss=..., metrics=...) first", fix="prepare a loss or metrics")
        loader = self._loader("evaluate", eval_data, batch_size, False, False)
        return self._evaluate(loader, self._verbose("evaluate", verbose), _positive("evaluate", "log_freq", log_freq),
                              num_samples)

    def predict(self, test_data, batch_size=32, num_workers=0, stack_outputs=False, verbose=1, callbacks=None):
        """The network's outputs over test_data (its input fields only), in eval mode: one list per output of
        numpy batches, or of one array each with stack_outputs=True."""
        loader = self._loader("predict", test_data, batch_size, False, False)
        verbose = self._verbose("predict", verbose)
        self.network.eval()
        bar = ProgressBar("Predict", self._total(loader), verbose, 10)
        step = self._step("predict")
        outputs: list = []
        with no_grad():
            for i, batch in enumerate(loader, 1):
                outs = step(*self._tensors("predict", batch))
                if not outputs:
                    outputs = [[] for _ in outs]
                for dest, o in zip(outputs, outs):
                    dest.append(o.numpy())
                bar.update(i, {})
        bar.close({})
        return [np.concatenate(o) for o in outputs] if stack_outputs else outputs

    # --- saving -----------------------------------------------------------------------------------------------------
    @staticmethod
    def _base(path) -> str:
        text = os.fspath(path)
        return text[:-len(PARAMS)] if text.endswith(PARAMS) else text

    def save(self, path, training: bool = True) -> None:
        """Write the network's state_dict to path + '.hwparams' and, with training and an optimizer, the
        optimizer's to path + '.hwopt' (hw.save: never pickled)."""
        base = self._base(path)
        folder = os.path.dirname(base)
        if folder:
            os.makedirs(folder, exist_ok=True)
        serialize.save(self.network.state_dict(), base + PARAMS)
        if training and self._optimizer is not None:
            serialize.save(self._optimizer.state_dict(), base + OPT)

    def load(self, path, skip_mismatch: bool = False, reset_optimizer: bool = False) -> None:
        """Read what save wrote: the weights, and the optimizer's state when there is one (unless
        reset_optimizer). skip_mismatch leaves out (with a warning) entries the network lacks or has in another
        shape."""
        base = self._base(path)
        dev = self._device()
        state = serialize.load(base + PARAMS, device=dev)
        if skip_mismatch:
            own = self.network.state_dict()
            fits = {k: v for k, v in state.items() if k in own and tuple(own[k].shape) == tuple(v.shape)}
            if len(fits) != len(state) or len(fits) != len(own):
                log.warning("Model.load: skipping %d entr(y/ies) of %s that do not fit the network: %s",
                            len(state) - len(fits), base + PARAMS, sorted(set(state) - set(fits))[:5])
            self.network.set_state_dict(fits, strict=False)
        else:
            self.network.set_state_dict(state)
        if self._optimizer is not None and not reset_optimizer and os.path.exists(base + OPT):
            self._optimizer.set_state_dict(serialize.load(base + OPT, device=dev))
