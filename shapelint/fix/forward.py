"""Which layer feeds which in a module's ``forward``: the proof that the next layer's
input is the output ``--fix`` widens.

Growing ``self.conv1``'s 60 output channels to 64 needs ``self.conv2``'s 60 input
channels to grow too, but only if conv2 reads conv1's output; another layer with 60
inputs elsewhere must not change. :class:`Forward` reads the class's ``forward``
straight through and tracks, for every local name, which sized layer's output it
holds (:class:`Flow`), through width-preserving steps only: activations, dropout,
norms (noted: they grow too), ``+``/``*`` with a constant, and a pool to one pixel
followed by ``flatten``. Each call of a ``self.<layer>`` records the flow of its
input. A call inside a branch or a loop, or of an input whose flow is unknown,
records "unknown": it proves nothing.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field, replace

from shapelint.fix.flow import method

#: the model input, as a "layer" of a flow
INPUT = "<input>"

#: torch.nn layers that keep the feature (channel) width of what they are given
KEEP_LAYERS = frozenset({
    "ReLU", "ReLU6", "GELU", "SiLU", "Tanh", "Sigmoid", "LeakyReLU", "ELU", "SELU", "CELU", "Mish", "Hardswish",
    "Hardsigmoid", "Hardtanh", "Softplus", "Softsign", "Tanhshrink", "Dropout", "Dropout1d", "Dropout2d", "Dropout3d",
    "AlphaDropout", "Identity", "Softmax", "LogSoftmax",
})
#: norms: they keep the width and are sized by it (the parameter that must grow with it)
NORM_LAYERS = {
    "BatchNorm1d": "num_features", "BatchNorm2d": "num_features", "BatchNorm3d": "num_features",
    "SyncBatchNorm": "num_features", "InstanceNorm1d": "num_features", "InstanceNorm2d": "num_features",
    "InstanceNorm3d": "num_features", "LayerNorm": "normalized_shape", "RMSNorm": "normalized_shape",
    "GroupNorm": "num_channels",
}
#: pools keep a convolution's channels (not a Linear's features: they pool the last dimension)
POOL_LAYERS = frozenset({
    "MaxPool1d", "MaxPool2d", "MaxPool3d", "AvgPool1d", "AvgPool2d", "AvgPool3d", "AdaptiveAvgPool1d",
    "AdaptiveAvgPool2d", "AdaptiveAvgPool3d", "AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "AdaptiveMaxPool3d",
})
#: functions and tensor methods that keep the width of their first input
KEEP_FUNCTIONS = frozenset({
    "relu", "relu_", "gelu", "silu", "tanh", "sigmoid", "dropout", "leaky_relu", "elu", "relu6", "mish", "hardswish",
    "softplus", "selu", "celu", "contiguous", "float", "half", "bfloat16", "to", "clone", "detach", "softmax",
})
#: what a name before a function names a module of functions (``torch.relu``, ``F.gelu``)
FUNCTION_MODULES = frozenset({"torch", "F", "functional", "nn"})
#: methods that flatten (to the channels alone after a pool to one pixel)
FLATTEN = frozenset({"flatten", "view", "reshape", "squeeze"})


@dataclass(frozen=True)
class Flow:
    """What a tensor in ``forward`` is: the output of ``layers`` (sized layers, or
    :data:`INPUT`), passed ``through`` the named norms; ``pooled``: a convolution's
    output pooled to one pixel (``flatten`` then keeps the channels)."""

    layers: frozenset[str]
    through: frozenset[str] = frozenset()
    pooled: bool = False
    conv: bool = False


def layer_class(call: ast.expr) -> str:
    """``nn.Conv2d(...)`` → ``Conv2d``; a call's class or function name, else ``""``."""
    if not isinstance(call, ast.Call):
        return ""
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def _is_function_module(node: ast.expr) -> bool:
    """``torch``, ``F``, ``torch.nn.functional``: a module of functions, not a tensor."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name) and node.id in FUNCTION_MODULES


def pool_to_one(call: ast.Call) -> bool:
    if not layer_class(call).startswith("Adaptive") or not call.args:
        return False
    size = call.args[0]
    sizes = size.elts if isinstance(size, ast.Tuple) else [size]
    return all(isinstance(s, ast.Constant) and s.value == 1 for s in sizes)


@dataclass
class Forward:
    """The flows of one class's ``forward``: ``sites[attr]`` is the input flow of each
    call of ``self.<attr>`` (None: unknown)."""

    modules: dict[str, ast.Call]
    sites: dict[str, list[Flow | None]] = field(default_factory=dict)
    env: dict[str, Flow | None] = field(default_factory=dict)

    # -- expressions ------------------------------------------------------------------

    def eval(self, expr: ast.expr | None) -> Flow | None:
        if isinstance(expr, ast.Name):
            return self.env.get(expr.id)
        if isinstance(expr, ast.Call):
            return self._call(expr)
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)):
            return self._binop(self.eval(expr.left), self.eval(expr.right), expr)
        self.unknown(expr)
        return None

    def _binop(self, left: Flow | None, right: Flow | None, expr: ast.BinOp) -> Flow | None:
        if isinstance(expr.right, ast.Constant):
            return left
        if isinstance(expr.left, ast.Constant):
            return right
        if left is None or right is None:
            return None
        return Flow(left.layers | right.layers, left.through | right.through, conv=left.conv and right.conv)

    def _call(self, call: ast.Call) -> Flow | None:
        f = call.func
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self" \
                and f.attr in self.modules:
            return self._module(f.attr, call)
        if isinstance(f, ast.Attribute) and f.attr in KEEP_FUNCTIONS | FLATTEN:
            as_function = _is_function_module(f.value)
            data = (call.args[0] if call.args else None) if as_function else f.value
            flow = self.eval(data)
            self.unknown(*(call.args[1:] if as_function else call.args), *call.keywords)
            if f.attr in FLATTEN:
                return replace(flow, pooled=False) if flow is not None and flow.pooled else None
            return flow
        self.unknown(call)
        return None

    def _module(self, attr: str, call: ast.Call) -> Flow | None:
        """A call of ``self.<attr>``: record its input's flow; the flow of its output."""
        built = self.modules[attr]
        kind = layer_class(built)
        if len(call.args) == 1 and not call.keywords:
            flow = self.eval(call.args[0])
        else:
            flow = None
            self.unknown(*call.args, *call.keywords)
        self.sites.setdefault(attr, []).append(flow)
        if flow is None:
            return None
        if kind in KEEP_LAYERS:
            return flow
        if kind in NORM_LAYERS:
            return replace(flow, through=flow.through | {attr})
        if kind in POOL_LAYERS:
            return replace(flow, pooled=pool_to_one(built)) if flow.conv else None
        if kind == "Flatten":
            return replace(flow, pooled=False) if flow.pooled else None
        return Flow(frozenset({attr}), conv="Conv" in kind)

    def unknown(self, *nodes: ast.AST | None) -> None:
        """Record every ``self.<module>`` call under ``nodes`` with an unknown input."""
        for node in nodes:
            for n in ast.walk(node) if node is not None else ():
                f = n.func if isinstance(n, ast.Call) else None
                if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self" \
                        and f.attr in self.modules:
                    self.sites.setdefault(f.attr, []).append(None)

    # -- statements ---------------------------------------------------------------------

    def run(self, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        params = [*fn.args.posonlyargs, *fn.args.args]
        if len(params) >= 2:
            self.env[params[1].arg] = Flow(frozenset({INPUT}))
        for stmt in fn.body:
            self._statement(stmt)

    def _statement(self, stmt: ast.stmt) -> None:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            self.env[stmt.targets[0].id] = self.eval(stmt.value)
        elif isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
            op = ast.BinOp(ast.Name(stmt.target.id, ast.Load()), stmt.op, stmt.value)
            self.env[stmt.target.id] = self.eval(op) if isinstance(stmt.op, (ast.Add, ast.Sub, ast.Mult)) else None
        elif isinstance(stmt, (ast.Return, ast.Expr)):
            self.eval(stmt.value)
        else:  # a branch, a loop, an unpacking: every call in it proves nothing
            self.unknown(stmt)
            for n in ast.walk(stmt):
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                    self.env[n.id] = None


def analyse(cls: ast.ClassDef) -> Forward | None:
    """The flows of ``cls.forward`` over the modules its ``__init__`` assigns
    (``self.x = nn.Linear(...)``), or None without both."""
    init, forward = method(cls, "__init__"), method(cls, "forward")
    if init is None or forward is None:
        return None
    modules: dict[str, ast.Call] = {}
    twice: set[str] = set()
    for node in ast.walk(init):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            t = node.targets[0]
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                if t.attr in modules:
                    twice.add(t.attr)
                if isinstance(node.value, ast.Call):
                    modules[t.attr] = node.value
    for attr in twice:
        modules.pop(attr, None)
    result = Forward(modules)
    result.run(forward)
    return result


__all__ = ["FLATTEN", "INPUT", "KEEP_LAYERS", "NORM_LAYERS", "POOL_LAYERS", "Flow", "Forward", "analyse", "layer_class",
           "pool_to_one"]
