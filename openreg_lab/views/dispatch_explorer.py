"""The dispatch explorer (``DispatchExplorer(op=None)``): pick an operator, see its dispatch table as
a grid of dispatch keys in priority order with what is registered at each and the path openreg takes
highlighted; flip requires_grad, autocast, inference mode and the profile to see the path change;
run it on sample inputs (PyTorch's OpInfo samples, or your own tensors) and see the recorded path
step by step with the decomposition tree and each sub-op's kernel.

``op`` may be a name (``"aten::linear"``), an overload, or a callable (``lambda: F.linear(x, w)``),
which is run and explained by the operators it called (``explain`` accepts callables too).
"""

from __future__ import annotations

import contextlib
import html
from collections.abc import Iterator
from typing import Any

import ipywidgets as w
import pandas as pd
import torch

from openreg_lab import theme
from openreg_lab.dispatch import explain as _explain
from openreg_lab.dispatch import profiles
from openreg_lab.dispatch.keys import key_grid
from openreg_lab.recording import flow
from openreg_lab.views import charts, png


def grid_html(grid: pd.DataFrame, path: list[str], resolution: str) -> str:
    """The key grid as HTML: the path's keys highlighted and numbered in the order the call visits them."""
    color = theme.RESOLUTION_COLORS.get(resolution, "#333")
    out = [
        "<table class='openreg-key-grid' style='border-collapse:collapse;font:12px system-ui,sans-serif'>",
        "<tr><th style='text-align:left;padding:2px 6px'>step</th>"
        "<th style='text-align:left;padding:2px 6px'>"
        "dispatch key</th><th style='text-align:left;padding:2px 6px'>registered</th>"
        "<th style='text-align:left;padding:2px 6px'>where</th></tr>",
    ]
    for r in grid.itertuples(index=False):
        step = path.index(r.key) + 1 if r.on_path else ""
        style = f"background:{color}22;font-weight:600" if r.on_path else "color:#666"
        src = html.escape(str(r.source).rsplit("/", 1)[-1])
        out.append(
            f"<tr class='openreg-key{' openreg-on-path' if r.on_path else ''}' style='{style}'>"
            f"<td style='padding:1px 6px'>{step}</td><td style='padding:1px 6px'>{html.escape(r.key)}</td>"
            f"<td style='padding:1px 6px'>{html.escape(r.registered)}</td>"
            f"<td style='padding:1px 6px'>{src}</td></tr>"
        )
    out.append("</table>")
    return "".join(out)


def opinfo_sample(op: str, requires_grad: bool) -> tuple[Any, tuple[Any, ...], dict[str, Any]] | None:
    """A sample call of ``op`` on openreg from PyTorch's OpInfo database: ``(callable, args, kwargs)``,
    or None when no OpInfo covers the op."""
    from torch.testing._internal.common_methods_invocations import op_db

    base = op.split("::")[-1].split(".")[0]
    for info in op_db:
        if base in (info.name, info.aten_name, info.name.split(".")[-1]):
            dtype = torch.float32 if torch.float32 in info.supported_dtypes("cpu") else None
            if dtype is None:
                continue
            rg = requires_grad and info.supports_autograd
            for sample in info.sample_inputs("openreg", dtype, requires_grad=rg):
                return info.op, (sample.input, *sample.args), dict(sample.kwargs)
    return None


def schemas() -> dict[str, str]:
    """Every registered operator overload's schema, by qualified name."""
    out = {}
    for name in sorted(torch._C._dispatch_get_all_op_names()):
        base, _, overload = name.partition(".")
        try:
            out[name] = str(torch._C._get_schema(base, overload))
        except RuntimeError:
            out[name] = name
    return out


def search_ops(text: str, table: dict[str, str]) -> list[str]:
    """The operator names whose name or schema contains ``text`` (case-insensitive)."""
    t = text.lower()
    return [n for n, sch in table.items() if t in n.lower() or t in sch.lower()]


def _op_name(op: Any) -> str:
    if isinstance(op, torch._ops.OpOverload):
        return op.name()
    if isinstance(op, torch._ops.OpOverloadPacket):
        # Its default overload if the dispatcher has it, else its first one the dispatcher has
        # (aten::add -> aten::add.Tensor: its "default" is TorchScript's, not the dispatcher's).
        qual = op._qualified_op_name
        registered = set(torch._C._dispatch_get_all_op_names())
        overloads = sorted(op.overloads(), key=lambda o: o != "default")
        for o in overloads:
            if (qual if o == "default" else f"{qual}.{o}") in registered:
                return f"{qual}.{o}"
        return f"{qual}.default"
    name = str(op)
    return name if "::" in name else f"aten::{name}"


class DispatchExplorer(w.VBox):
    """The dispatch explorer; see the module docstring. ``args``/``kwargs`` are your own inputs."""

    def __init__(self, op: Any = None, *args: Any, **kwargs: Any) -> None:
        self._fn = (
            op
            if callable(op) and not isinstance(op, (str, torch._ops.OpOverload, torch._ops.OpOverloadPacket))
            else None
        )
        self._user_args = (args, kwargs) if (args or kwargs) else None
        # A packet with your inputs is explained as explain() does: the overload the arguments pick.
        self._packet = op if isinstance(op, torch._ops.OpOverloadPacket) else None
        names = sorted(torch._C._dispatch_get_all_op_names())
        start = "aten::linear" if op is None or self._fn is not None else _op_name(op)
        if (
            start not in names
            and f"{start}.default" not in names
            and start.removesuffix(".default") not in names
        ):
            raise ValueError(f"DispatchExplorer: no operator named {start!r}")
        self.picker = w.Combobox(
            value=start,
            options=names,
            placeholder="search an operator…",
            description="operator",
            ensure_option=False,
            layout=w.Layout(width="420px"),
        )
        self._schemas = schemas()
        self.search = w.Text(
            placeholder="search names and schemas, e.g. Tensor? bias",
            continuous_update=False,
            layout=w.Layout(width="300px"),
        )
        self.search.observe(self._searched, "value")
        self.schema = w.HTML()
        self.requires_grad = w.Checkbox(value=True, description="requires_grad", indent=False)
        self.autocast = w.Checkbox(value=False, description="autocast (bfloat16)", indent=False)
        self.inference = w.Checkbox(value=False, description="inference mode", indent=False)
        self.every_backend = w.Checkbox(value=False, description="every backend's keys", indent=False)
        self.profile = w.Dropdown(
            options=["(active)", *profiles.BUILTIN_PROFILES], value="(active)", description="profile"
        )
        self.run_button = w.Button(description="run it", button_style="primary", icon="play")
        self.grid = w.HTML()
        self.grid.add_class("openreg-key-grid-box")
        self.steps = w.HTML()
        self.steps.add_class("openreg-details")
        import plotly.graph_objects as go

        self.flow = go.FigureWidget()
        self.flow.add_class("openreg-chart")
        self.explanation: Any = None
        for c in (self.requires_grad, self.autocast, self.inference, self.every_backend, self.profile):
            c.observe(lambda _: self.refresh(), "value")
        self.picker.observe(self._picked, "value")
        self.run_button.on_click(lambda _: self.run())
        toggles = w.HBox(
            [self.requires_grad, self.autocast, self.inference, self.profile, self.every_backend]
        )
        super().__init__(
            [
                w.HBox([self.picker, self.search, self.run_button]),
                self.schema,
                toggles,
                w.HBox([self.grid, self.steps]),
                self.flow,
            ]
        )
        self.add_class("openreg-dispatch-explorer")
        self.run()

    def _searched(self, change: dict[str, Any]) -> None:
        found = search_ops(change["new"], self._schemas) if change["new"] else list(self._schemas)
        self.picker.options = found or list(self._schemas)

    @property
    def op(self) -> str:
        """The qualified overload name being explored."""
        return _op_name(self.picker.value)

    def _picked(self, change: dict[str, Any]) -> None:
        if change["new"] in self.picker.options:
            self._fn = None
            self._user_args = None
            self._packet = None
            self.run()

    @contextlib.contextmanager
    def _toggles(self) -> Iterator[None]:
        with contextlib.ExitStack() as stack:
            if self.profile.value != "(active)":
                stack.enter_context(profiles.use_profile(self.profile.value))
            if self.inference.value:
                stack.enter_context(torch.inference_mode())
            if self.autocast.value:
                stack.enter_context(torch.autocast("openreg", dtype=torch.bfloat16))
            yield

    def _call(self) -> tuple[Any, tuple[Any, ...], dict[str, Any]] | None:
        if self._fn is not None:
            return self._fn, (), {}
        if self._user_args is not None:
            return torch.ops.aten, *self._user_args  # type: ignore[return-value]
        return opinfo_sample(self.op, self.requires_grad.value)

    def run(self) -> Any:
        """Explain the op (or callable) on its sample inputs under the toggles; redraw everything."""
        call = self._call()
        with self._toggles():
            if call is None:
                e = None
                note = f"No OpInfo sample for {self.op}: pass your own tensors, DispatchExplorer(op, x, ...)"
            elif self._fn is not None:
                e = _explain.explain(self._fn)
                note = f"ran {e.called}"
            elif self._user_args is not None:
                target = self._packet if self._packet is not None else self.op.removesuffix(".default")
                e = _explain.explain(target, *call[1], **call[2])
                note = "ran on your inputs"
            else:
                fn, args, kwargs = call
                e = _explain.explain(fn, *args, **kwargs)
                note = "ran on an OpInfo sample: " + ", ".join(_describe(a) for a in args)
        self.explanation = e
        self._draw(e, note)
        return e

    def refresh(self) -> None:
        """Redraw after a toggle (runs the sample again: the path depends on the toggles)."""
        self.run()

    def _draw(self, e: Any, note: str) -> None:
        op = e.op if e is not None else self.op
        path = list(
            e.keys if e is not None and e.called is not None else [s.key for s in (e.steps if e else ())]
        )
        self.schema.value = f"<code>{html.escape(e.schema if e else op)}</code> · {html.escape(note)}"
        grid = key_grid(op, path, every_backend=self.every_backend.value)
        self.grid.value = grid_html(grid, path, e.resolution if e else "")
        self.steps.value = steps_html(e)
        if e is not None and e.trace is not None:
            fig = charts.dispatch_flow(flow.dispatch_flows(e.trace.events))
            fig.update_layout(height=300, title={"text": "Dispatch flow of the recorded run (calls)"})
            with self.flow.batch_update():
                self.flow.data = []
                self.flow.layout = fig.layout
                self.flow.add_traces(list(fig.data))

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        bundle = super()._repr_mimebundle_(**kwargs) or {}
        bundle["text/html"] = self.schema.value + self.grid.value + self.steps.value
        bundle["text/plain"] = f"<openreg dispatch explorer: {self.op}>"
        return png.add_png(bundle, self.flow)


def _describe(a: Any) -> str:
    if isinstance(a, torch.Tensor):
        return f"{str(a.dtype).removeprefix('torch.')}{list(a.shape)}" + (
            " requires_grad" if a.requires_grad else ""
        )
    return repr(a)[:30]


def steps_html(e: Any) -> str:
    """The explanation step by step: each key's action, then the decomposition tree with kernels."""
    if e is None:
        return "<div style='color:#666'>Nothing was run.</div>"
    items = [
        f"<li><b>{html.escape(s.key)}</b>: {html.escape(s.registered)}, {html.escape(s.action)}</li>"
        for s in e.steps
    ]
    calls = "".join(
        f"<div style='padding-left:{12 * c.depth + 4}px'>"
        f"<span style='color:{theme.kernel_color(c.ran or None)}'>■</span> "
        f"{html.escape(c.op)} <span style='color:#666'>{html.escape(c.ran or c.kernel)}</span></div>"
        for c in e.calls[:80]
    )
    error = f"<div style='color:#b00020'>raised {html.escape(e.error)}</div>" if e.error else ""
    return (
        f"<div style='font:12px system-ui,sans-serif;padding-left:12px'><b>path</b><ol>{''.join(items)}</ol>"
        f"<b>openreg</b>: {html.escape(e.resolution)} ({html.escape(e.kernel)})"
        + (f"<div><b>decomposes into</b>{calls}</div>" if calls else "")
        + error
        + "</div>"
    )
