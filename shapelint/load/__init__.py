"""Load: build a target's model and example inputs on fake tensors, so nothing of the
model's size is allocated.

Entry: :func:`shapelint.load.run.load` (a path → a :class:`shapelint.load.loaded.Loaded`).
One module per target kind (:mod:`.python_target`, :mod:`.yaml_target`,
:mod:`.hf_target`, with :mod:`.hf_config`, :mod:`.hf_model` and :mod:`.hf_inputs`);
:mod:`.fake` builds on fake tensors; :mod:`.calling`, :mod:`.usercode` and
:mod:`.builders` run the user's code behind one boundary; :mod:`.validate` checks every
value first. :mod:`.real` builds a target for real for ``--verify --step``;
:mod:`.in_memory` takes a model the caller already holds (the Python API).
"""
