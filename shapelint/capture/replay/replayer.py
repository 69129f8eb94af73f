"""The replayer, replay's entry: wraps the forward of every member of a group of
alike layers while the step runs, runs the first two calls of a group for real between
marks, replays later ones from the template, and after backward checks what the real
runs proved and expands the placeholders (:meth:`Replayer.finish`). The package's
docstring (:mod:`shapelint.capture.replay`) states what makes a copy exact."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

from shapelint.capture.recorder import Recorder
from shapelint.capture.replay import compare, copying
from shapelint.capture.replay.calls import Out, Signature, blocked, form, meta, same_tensors, signature, substitute
from shapelint.capture.replay.layers import find_groups, global_hooks, hooked
from shapelint.capture.replay.marks import Mark, ReplayedLayer
from shapelint.capture.replay.state import Call, Group, Member, Replayed, Span
from shapelint.capture.replay.stats import STATS
from shapelint.capture.sources import user_frame_source


class Replayer:
    """Finds the stacks of ``root``, wraps their members' forward while installed,
    and after backward checks and expands what it replayed (:meth:`finish`)."""

    def __init__(self, rec: Recorder, root: torch.nn.Module) -> None:
        self.rec = rec
        self.members: list[Member] = []
        self.groups: list[Group] = []
        self.replays: list[Replayed] = []
        self.calls: list[Call] = []
        self.placeholders: list[Replayed] = []
        self.tainted = ""
        self._busy = False
        self._hooks: list[Any] = []
        self._bwd_owners: dict[int, copying.Owners] = {}
        STATS.reset()
        if global_hooks():
            # they would run for every submodule of a layer that a replay skips
            STATS.decline("global module hooks are set")
            return
        self.groups, self.members = find_groups(root)
        STATS.groups = len(self.groups)

    @property
    def used(self) -> bool:
        return bool(self.calls)

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """Members' forwards go through the replayer while the ``with`` body runs."""
        for m in self.members:
            m.module.forward = self._forward(m)  # type: ignore[method-assign]
        try:
            yield
        finally:
            for m in self.members:
                vars(m.module).pop("forward", None)

    def _forward(self, m: Member) -> Callable[..., Any]:
        original = type(m.module).forward

        def forward(*args: Any, **kwargs: Any) -> Any:
            if self._busy or m.called or m.group.off:
                return original(m.module, *args, **kwargs)
            m.called = True
            why = blocked() or ("" if not hooked(m.module) else "hooks were added while the model ran")
            sig = signature(args, kwargs) if not why else why
            if isinstance(sig, str):
                STATS.decline(f"{m.path}: {sig}")
                return original(m.module, *args, **kwargs)
            site = user_frame_source()
            if m.group.template is None:
                return self._run_marked(m, original, args, kwargs, sig, site)
            replayed = self._replay(m, sig, site)
            if replayed is not None:
                return replayed
            return original(m.module, *args, **kwargs)

        return forward

    # -- the two real runs -------------------------------------------------------------------
    def _run_marked(self, m: Member, original: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                    sig: Signature, site: Any) -> Any:
        rec, x = self.rec, sig.x
        x_serial = rec.serial(x)
        call = Call(m, sig, site, x_serial, Span.open(rec))
        with rec.paused():
            xm = Mark.apply(x, call, True, self)
        self._alias(xm, x, x_serial)
        call.fwd = Span.open(rec)
        version = xm._version
        self._busy = True
        try:
            out = original(m.module, *substitute(args, x, xm), **substitute(kwargs, x, xm))
        finally:
            self._busy = False
        call.fwd.close(rec)
        self.calls.append(call)
        self._hooks.append(x.register_hook(lambda g: self._total_grad(call, g)))
        group = m.group
        if xm._version != version:
            self.tainted = f"{m.path} changes its input in place"
            group.off = self.tainted
            return out
        formed = form(out)
        why = formed if isinstance(formed, str) else compare.output_problem(rec, call, formed[1], x, xm)
        if why:
            group.off = f"{m.path}: {why}"
            STATS.decline(group.off)
            return out
        assert not isinstance(formed, str)
        call.form, ys = formed
        call.outs = tuple(Out(rec.serial(y), meta(y), y.requires_grad, rec.is_softmaxed(y), rec.is_param_like(y))
                          for y in ys)
        with rec.paused():
            ym = Mark.apply(ys[0], call, False, self)
        self._alias(ym, ys[0], call.outs[0].serial)
        call.marked_out, call.out_version = ym, ym._version
        self._prove(group, call)
        return call.form.build([ym, *ys[1:]])

    def _prove(self, group: Group, call: Call) -> None:
        """The group's first real call is its proof; the second its template, where it
        made the same forward records."""
        if group.proof is None:
            group.proof = call
            return
        why = compare.same_forward(self.rec, group.proof, call)
        if why:
            group.off = f"{group.proof.member.path} and {call.member.path}: {why}"
            STATS.decline(group.off)
        else:
            group.template = call
            STATS.templates += 1

    def _alias(self, new: torch.Tensor, old: torch.Tensor, serial: int) -> None:
        """``new`` (a mark) stands for ``old``: its serial number and lineage."""
        rec = self.rec
        rec.adopt(new, serial, softmaxed=rec.is_softmaxed(old), param_like=rec.is_param_like(old))

    def mark_backward(self, call: Call, entry: bool, grad: torch.Tensor | None) -> None:
        """Backward reached ``call``'s output (its backward span opens) or its input (it closes)."""
        rec = self.rec
        if grad is None:
            self.tainted = f"{call.member.path} got no gradient"
            return
        if not entry:
            call.bwd = Span.open(rec)
            call.out_grad, call.out_grad_meta = rec.serial(grad), meta(grad)
        else:
            if call.bwd is not None and not call.bwd_closed:
                call.bwd.close(rec)
                call.bwd_closed = True
            call.in_grad, call.in_grad_meta = rec.serial(grad), meta(grad)

    def _total_grad(self, state: Call | Replayed, grad: torch.Tensor) -> None:
        state.total_grad = self.rec.serial(grad)

    # -- replay -----------------------------------------------------------------------
    def _replay(self, m: Member, sig: Signature, site: Any) -> Any:
        t = m.group.template
        assert t is not None
        if sig.key != t.sig.key or site != t.site:
            STATS.decline(f"{m.path}: called unlike {t.member.path}")
            return None
        if not same_tensors(sig, t.sig):
            STATS.decline(f"{m.path}: given other tensors than {t.member.path}")
            return None
        rec, x = self.rec, sig.x
        owners = copying.owners(rec, t, m, t.fwd.shapes(rec))
        if owners is None:
            return None
        x_serial = rec.serial(x)
        state = Replayed(m, t, x_serial, rec.reserve_serials(t.fwd.made), meta(x),
                         tuple(p for p in m.module.parameters() if p.requires_grad))
        serial = copying.serial_map(t, state, backward=False)
        copying.append_forward(rec, t, copying.copy_shapes(t.fwd.shapes(rec), owners),
                               copying.copy_ops(t, m, serial, t.fwd.ops(rec)))
        with rec.paused():
            ys = ReplayedLayer.apply(state, self, x, *state.params)
        for y, o in zip(ys, t.outs):
            rec.adopt(y, serial(o.serial), softmaxed=o.softmaxed, param_like=o.param_like)
        self._hooks.append(x.register_hook(lambda g: self._total_grad(state, g)))
        self.replays.append(state)
        assert t.form is not None
        return t.form.build(list(ys))

    def replay_backward(self, state: Replayed, x: torch.Tensor, grad: torch.Tensor | None, others: bool
                        ) -> list[torch.Tensor | None]:
        """Empty gradients for the replayed layer's input and parameters, and a
        placeholder where its template's backward records go after backward."""
        rec = self.rec
        if grad is None or others:
            self.tainted = f"replayed {state.member.path} got no gradient, or one on another output"
        with rec.paused():
            gx = torch.empty_like(x)
            grads: list[torch.Tensor | None] = [gx, *(torch.empty_like(p) for p in state.params)]
        if grad is not None:
            state.out_grad, state.out_grad_meta = rec.serial(grad), meta(grad)
        state.in_grad, state.in_grad_meta = rec.serial(gx), meta(gx)
        state.placeholder = rec.position()
        self.placeholders.append(state)
        return grads

    # -- after backward ---------------------------------------------------------------------
    def finish(self) -> str:
        """Check what the real runs proved and expand the placeholders; why the records
        cannot stand ("" when they can)."""
        for h in self._hooks:
            h.remove()
        self._hooks.clear()
        why = self.tainted or self._check()
        if why:
            return why
        copying.expand(self.rec, self.placeholders, self._bwd_owners)
        copying.drop_grads_the_template_lacks(self.replays)
        STATS.replayed = len(self.replays)
        return ""

    def _check(self) -> str:
        why = self._check_real_calls() or self._check_replays()
        if why:
            return why
        proven: list[Call] = []
        for group in self.groups:
            a, b = group.proof, group.template
            replayed = [r for r in self.replays if r.template is b]
            if a is None or b is None or not replayed:
                continue
            why = self._check_group(a, b, replayed)
            if why:
                return why
            proven += [a, b]
        return compare.escapes(self.rec, proven)

    def _check_real_calls(self) -> str:
        """Each real call's output unchanged in place, its backward seen whole, its
        input's gradient the one it returned."""
        for call in self.calls:
            if call.marked_out is not None and call.marked_out._version != call.out_version:
                return f"the output of {call.member.path} is changed in place"
            if call.bwd is not None and not call.bwd_closed:
                return f"the backward of {call.member.path} did not reach its input"
            if call.total_grad not in (-1, call.in_grad):
                return f"the input of {call.member.path} gets gradient from elsewhere too"
        return ""

    def _check_replays(self) -> str:
        """Each replayed call's backward ran, and its input's gradient is the one it returned."""
        for r in self.replays:
            if r.placeholder is None:
                return f"the backward of replayed {r.member.path} never ran"
            if r.total_grad != r.in_grad:
                return f"the input of {r.member.path} gets gradient from elsewhere too"
        return ""

    def _check_group(self, a: Call, b: Call, replayed: list[Replayed]) -> str:
        """The proof's and the template's backwards agree, and each replayed member's
        gradients and modules are like the template's (its backward owners are kept)."""
        if not (a.bwd_closed and b.bwd_closed):
            return f"the backward of {a.member.path} or {b.member.path} was not seen whole"
        why = compare.same_backward(self.rec, a, b)
        if why:
            return f"{a.member.path} and {b.member.path}: {why}"
        assert b.bwd is not None
        for r in replayed:
            if r.out_grad_meta != b.out_grad_meta or r.in_grad_meta != b.in_grad_meta:
                return f"the gradients of {r.member.path} are laid out unlike {b.member.path}'s"
            owners = copying.owners(self.rec, b, r.member, b.bwd.shapes(self.rec))
            if owners is None:
                return f"the backward GEMMs of {b.member.path} have owners {r.member.path} lacks"
            self._bwd_owners[id(r)] = owners
        return ""
