"""Transfer learning of image classifiers (the alignment paper, Sections 7.2-7.3 and appendix D): pre-training on a
source task, cached in the checkpoint store (:func:`pretrain_cnn`), fine-tuning a copy end to end on a target
(:func:`finetune`, through :func:`layersim.train.training.train_epochs`) and top-1 accuracy (:func:`accuracy`) (see
docs/modules.md, ``layersim.train.transfer_learning``)."""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from layersim.measures import probe
from layersim.nets.cnn import CNNConfig, build_cnn, replace_head
from layersim.nets.models import resolve_device
from layersim.train import training


def pretrain_cnn(cfg: CNNConfig, train_cfg: training.TrainConfig, train_set, data_desc: dict,
                 init_from: tuple[nn.Module, str] | None = None, device: str | torch.device = "auto",
                 progress: bool = False, retrain: bool = False) -> tuple[nn.Module, dict]:
    """Train the network of ``cfg`` on ``train_set`` (or a callable, called only when no checkpoint exists) with
    :func:`layersim.train.training.cached_model` (prefix ``"cnn"``), or load it. ``init_from=(model, key)``: start
    from a copy of ``model`` with a new head, ``key`` entering the cache key. Returns
    ``(model in eval mode, meta)``."""
    desc = dict(data_desc)
    if init_from is not None:
        base, base_key = init_from
        desc["init_from"] = base_key

        def build():
            return replace_head(copy.deepcopy(base).cpu(), cfg.num_classes, seed=train_cfg.seed)
    else:
        def build():
            return build_cnn(cfg, seed=train_cfg.seed)

    return training.cached_model("cnn", build, cfg, train_cfg, train_set, desc, device=device,
                                 progress=progress, retrain=retrain)


def _loader(data, batch_size: int, shuffle: bool, seed: int = 0) -> DataLoader:
    if isinstance(data, (tuple, list)):
        data = TensorDataset(torch.as_tensor(data[0]), torch.as_tensor(data[1]))
    gen = torch.Generator().manual_seed(seed)
    return DataLoader(data, batch_size=batch_size, shuffle=shuffle, generator=gen if shuffle else None)


def accuracy(model: nn.Module, data, batch_size: int = 512, device: str | torch.device = "cpu") -> float:
    """Top-1 accuracy (:func:`layersim.measures.probe.top1_accuracy`) of ``model`` on ``data``: ``(images, labels)``
    tensors or a Dataset. The model's training mode is restored afterwards."""
    dev = resolve_device(device)
    was_training = model.training
    model.to(dev).eval()
    logits, labels = [], []
    with torch.no_grad():
        for x, y in _loader(data, batch_size, shuffle=False):
            logits.append(model(x.to(dev)).float().cpu())
            labels.append(y)
    model.train(was_training)
    if not labels:
        raise ValueError("accuracy of an empty data set")
    return probe.top1_accuracy(torch.cat(logits), torch.cat(labels).numpy())


def finetune(model: nn.Module, train_data, test_data, num_classes: int, epochs: int = 10, lr: float = 0.01,
             momentum: float = 0.9, weight_decay: float = 1e-4, batch_size: int = 64, seed: int = 0,
             new_head: bool = True, device: str | torch.device = "cpu", eval_every: int = 1) -> tuple[nn.Module, dict]:
    """Fine-tune a copy of ``model`` end to end (appendix D: SGD, momentum 0.9, weight decay 1e-4) on
    ``train_data``; ``new_head``: a fresh ``num_classes``-way classifier first. Returns ``(copy, history)``:
    ``train_loss`` per epoch, ``test_accuracy`` at ``eval_epochs`` (0, every ``eval_every``, the last) and
    ``final_accuracy``."""
    if epochs < 1 or lr <= 0:
        raise ValueError(f"epochs and lr must be positive, got {epochs}, {lr}")
    dev = resolve_device(device)
    net = copy.deepcopy(model).to(dev)
    if new_head:
        replace_head(net, num_classes, seed=seed)
    opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=momentum, weight_decay=weight_decay)
    loader = _loader(train_data, batch_size, shuffle=True, seed=seed)
    hist = {"test_accuracy": [accuracy(net, test_data, device=dev)], "eval_epochs": [0]}

    def evaluate(epoch: int) -> None:
        if epoch % max(1, eval_every) == 0 or epoch == epochs:
            hist["test_accuracy"].append(accuracy(net, test_data, device=dev))
            hist["eval_epochs"].append(epoch)

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        epochs_run = training.train_epochs(net, opt, epochs, lambda epoch: ((x.to(dev), y.to(dev)) for x, y in loader),
                                           lambda x, y: F.cross_entropy(net(x), y), after_epoch=evaluate,
                                           what="fine-tuning")
    hist = {"train_loss": [e["loss"] for e in epochs_run], **hist}
    net.eval()
    hist["final_accuracy"] = hist["test_accuracy"][-1]
    return net, hist
