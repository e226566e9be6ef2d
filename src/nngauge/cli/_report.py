"""``nngauge report MODEL --data DATA --out report.html``: one page of verdicts and plots."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

MODEL_HELP = ("path/to/file.py:function (returns an nn.Module), a saved TorchScript / "
              "torch.export (.pt2) / pickled module (.pt, with --trust-pickle), a built-in "
              "such as mlp:depth=20,width=100,activation=relu,norm=batch, or a name of the "
              "ecosystem, randomly initialized and never downloaded: timm:resnet50[:key=value,"
              "...] (pip install 'nngauge[timm]'), torchvision:resnet18[:key=value,...] (with "
              "torchvision installed), hf:path/to/folder (written by save_pretrained; pip "
              "install 'nngauge[hf]').")
WEIGHTS_HELP = ("Load these weights into MODEL (strictly: every name and shape): a "
                ".safetensors file (pip install 'nngauge[safetensors]'), or a torch.save "
                "checkpoint (.pt, .pth, .bin, .ckpt; one holding more than tensors only with "
                "--trust-pickle).")
DATA_HELP = ("waveform, mnist1d (MNIST-1D: the published 5,000 samples; n=..., seed=...), "
             "digits, digits:image (1x8x8), gaussian:d=100[,n=1000], "
             "gaussian:shape=3x32x32[,n=...], tokens:vocab=256,length=64[,n=...], a .npz / "
             ".pt file of inputs (and labels), or file.py:function returning (inputs, labels), "
             "a Dataset or a DataLoader.")
MODES = ("train", "eval", "frozen")
REPORT_EXAMPLES = (
    "nngauge report mlp:depth=20,width=100,activation=tanh --data waveform --quick",
    "nngauge report examples/resnet.py:build --data gaussian:shape=3x32x32,n=512 --out r.html",
    ("nngauge report timm:resnet18:num_classes=10 --data gaussian:shape=3x32x32,n=256 --mode "
     "eval --weights resnet18.safetensors"),
)


def report(
    model: str = typer.Argument(..., metavar="MODEL", help=MODEL_HELP),
    data: str = typer.Option(..., "--data", help=DATA_HELP),
    out: Path = typer.Option(Path("report.html"), "--out", help="Where to write the HTML page."),
    json_out: Optional[Path] = typer.Option(None, "--json",
                                            help="Also write every number as JSON."),
    seed: int = typer.Option(0, "--seed",
                             help="Seed of the data, the built-in model and the measures."),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", min=2,
                                             help="NLC batch size (default 250)."),
    n_batches: Optional[int] = typer.Option(None, "--n-batches", min=1,
                                            help="NLC batches (default: one pass over the data)."),
    samples: Optional[int] = typer.Option(None, "--samples", min=2,
                                          help="Samples of the data to use (default: generated "
                                          "sets 1000, files all)."),
    quick: bool = typer.Option(False, "--quick", help="Fewer samples and iterations: seconds."),
    output: Optional[str] = typer.Option(
        None, "--output", help="Which output to measure when the model returns a dict, tuple "
        "or ModelOutput: a key, or an index (default: the 'logits' entry)."),
    input_module: Optional[str] = typer.Option(
        None, "--input-module", help="Measure from this submodule's output (e.g. a token "
        "model's embedding; integer data use the first nn.Embedding by default)."),
    mode: Optional[str] = typer.Option(
        None, "--mode", help="Batchnorm statistics: train (batch), eval (running), frozen "
        "(computed on the data, then fixed); default: as the model is."),
    dropout: bool = typer.Option(False, "--dropout", help="Keep dropout on while measuring."),
    budget: Optional[float] = typer.Option(
        None, "--budget", min=1.0, help="Seconds the sections may spend (default 40, --quick "
        "10); each section scales its samples to it."),
    weights: Optional[Path] = typer.Option(None, "--weights", help=WEIGHTS_HELP),
    trust_pickle: bool = typer.Option(False, "--trust-pickle",
                                      help="Allow loading a pickled nn.Module or checkpoint "
                                      "that needs code to load (runs code from the file: only "
                                      "for files you trust)."),
) -> None:
    """Measure a model at initialization and judge it against the papers, in one HTML page.

    Exit status: 0 when the page is written (whatever its verdicts), 2 on bad input, 130 on
    Ctrl-C (the sections finished so far are written, marked as interrupted)."""
    from nngauge._internal.usage import gibibytes
    from nngauge.data._sources import load_data
    from nngauge.errors import invalid
    from nngauge.nn._sources import load_model
    from nngauge.report import SECTION_BUILDERS, ReportInterrupted, build_report

    if mode is not None and mode not in MODES:
        raise invalid("nngauge report", f"--mode one of {', '.join(MODES)}", repr(mode),
                      "use --mode eval (running statistics) or --mode frozen")
    for option, path in (("--out", out), ("--json", json_out)):
        if path is not None:
            _require_writable(option, path)
    source = load_data(data, seed=seed, n=samples)
    module = load_model(model, data=source, trust_pickle=trust_pickle, seed=seed,
                        weights=weights)
    try:
        with _progress(len(SECTION_BUILDERS)) as step:
            result = build_report(module, source.as_pair(), generator=seed,
                                  batch_size=batch_size,
                                  n_batches=n_batches, quick=quick,
                                  output=int(output) if output and output.isdigit() else output,
                                  input_module=input_module, norm_mode=mode, dropout=dropout,
                                  budget=budget, model_name=model, data_name=data,
                                  progress=step, planned=_state_plan)
    except ReportInterrupted as stop:  # Ctrl-C: the finished sections are still worth a page
        _write(stop.report, out, json_out)
        typer.echo(f"interrupted: {stop.report.banner}; wrote the partial report to {out}"
                   + (f" and {json_out}" if json_out is not None else ""), err=True)
        raise SystemExit(130) from None
    _write(result, out, json_out)
    counts = {s: sum(v.status == s for v in result.verdicts) for s in ("ok", "warn", "bad")}
    sections = {s: sum(x.status == s for x in result.sections) for s in ("failed", "skipped")}
    typer.echo(f"{result.status}: {counts['ok']} ok, {counts['warn']} warn, {counts['bad']} bad"
               f"; {sections['failed']} section(s) failed, {sections['skipped']} skipped"
               f" in {result.seconds:.1f} s (budget {result.settings.budget:g} s), peak memory "
               f"{gibibytes(result.peak_memory)}; wrote {out}"
               + (f" and {json_out}" if json_out is not None else ""))


def _state_plan(settings) -> None:
    """Say up front, on stderr, how the budget is shared: each section's seconds and the
    sections skipped because their least work does not fit."""
    typer.echo(f"plan: {settings.choices[0]}", err=True)


def _require_writable(option: str, path: Path) -> None:
    """Refuse, before any measuring, a page that could not be written at the end."""
    import os

    from nngauge.errors import invalid

    folder = path.parent if str(path.parent) else Path(".")
    why = (f"{path} is a folder" if path.is_dir()
           else f"its folder {folder} does not exist" if not folder.is_dir()
           else f"its folder {folder} is not writable" if not os.access(folder, os.W_OK)
           else "")
    if why:
        raise invalid("nngauge report", f"{option} a file path in an existing, writable folder",
                      f"{option} {path} ({why})",
                      f"create the folder (mkdir -p {folder}) or pass another {option}")


def _write(result, out: Path, json_out: Optional[Path]) -> None:
    """The HTML page to ``out`` and, when asked, the JSON to ``json_out``."""
    result.save(out)
    if json_out is not None:
        json_out.write_text(result.to_json(), encoding="utf-8")


class _progress:
    """A rich progress bar over the sections on a terminal; silent otherwise."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.bar = None

    def __enter__(self):
        if not sys.stdout.isatty():
            return lambda title: None
        from rich.progress import Progress

        self.bar = Progress(transient=True)
        self.bar.start()
        task = self.bar.add_task("measuring", total=self.total)
        started = []

        def step(title: str) -> None:
            if started:
                self.bar.advance(task)
            started.append(title)
            self.bar.update(task, description=title)

        return step

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.stop()
