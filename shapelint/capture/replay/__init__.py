"""Replay: trace a stack of identical layers once and copy its records for the rest.

A Llama-2-70B step runs 80 decoder layers that make the same ops on the same
shapes; tracing each one costs about 64k fake-tensor dispatches in all. Here the
records of such layers are copied instead, where they are provably the records a
full trace gives:

1. **Stacks** (found before the model runs): each ``nn.ModuleList`` / ``nn.Sequential``
   with at least 3 children of one class (not inside another stack). Its children
   are grouped by a structural fingerprint: for the child and every submodule, the
   class, parameters and buffers (name, shape, dtype, requires_grad), ``training``,
   and every primitive attribute except the ones that hold each child's own index
   (``layer_idx``). A child with instance hooks, an instance ``forward``, or a
   parameter or module shared with any other place of the model has no group.
2. **Two real runs**: the first two calls of a group's members run for real, marked
   by identity autograd functions on the one input and the one output that
   require grad (the marks record nothing and are new tensors with the serial of
   the tensor they stand for, so no record changes). The marks give each call's
   forward span (the GEMM records, ops and serial numbers made between two
   positions of the recording) and, in backward, its backward span: the exit
   mark's backward opens it and the entry mark's closes it (the CPU autograd
   engine runs one ready node at a time, the most recently created first, so with
   one grad-requiring input and output a layer's backward runs between them).
   The second call is the **template** when its forward records equal the first
   call's after renaming (module paths, serials).
3. **Replay** of a later member, decided per call (anything else runs the layer):
   the same call signature as the template (tensor shapes, strides, dtypes,
   requires_grad, offsets; every tensor but the input the very same object; other
   arguments equal; grad mode, autocast, the calling line), not in backward and no
   saved-tensor hooks (activation checkpointing). Its forward is not run: the
   template's forward records are appended with module paths renamed (the member's
   own ``ModuleInfo``) and serials remapped (serials the template made → fresh ones,
   the template's input → this input, anything older → itself), and one autograd
   function turns (input, parameters) into an output of the template output's
   shape, stride and dtype. Its backward returns empty gradients for the input and
   every parameter and leaves a placeholder in the record streams.
4. **After backward** the placeholders become copies of the template's backward span
   (same renaming, the same serial map as that member's forward, the incoming and
   returned gradients' serials), once it is checked that: the two real calls'
   backward records agree too; neither recomputed anything; nothing outside a real
   call's spans touched a tensor it made (other than its output); each layer's
   input got exactly the gradient the layer returned (no other reader of the
   input whose gradient the marks would add in another order); the gradients a
   placeholder saw and returned have the template's layout; no input or output
   was changed in place. Otherwise :meth:`Replayer.finish` says why and capture
   traces the model again without replay.

The modules, one idea each: :mod:`.layers` finds the stacks and groups their
children by fingerprint; :mod:`.calls` is a call as replay compares it (signature,
output form); :mod:`.state` what replay keeps of each group, member and call;
:mod:`.marks` the autograd functions that mark a real call and stand for a replayed
one; :mod:`.compare` the checks that two real calls made the same records;
:mod:`.copying` a template's records copied for a member; :mod:`.replayer`, the
entry, drives them during capture; :mod:`.stats` says what replay did.
"""
