"""The software stacks pdtrt deploys to, each behind one interface.

:mod:`~pdtrt.targets.base` is the interface (:class:`~pdtrt.targets.base.TargetSupport`: the
spec rules, engine defaults, build steps, engine model and launch of a target),
:mod:`~pdtrt.targets.registry` maps each :class:`~pdtrt.enums.Target` to its object. One module
per target: :mod:`~pdtrt.targets.reference`, :mod:`~pdtrt.targets.trtllm_0_21` (with its
helpers ``trtllm_build``, ``trtllm_rules``, ``trtllm_launch``, ``schema``, ``toolchain``),
:mod:`~pdtrt.targets.trtllm_1_2` (with ``llm_options``, ``llm_args``, ``server_launch``); the
two container targets share :class:`~pdtrt.targets.container.ContainerTarget`.

Adding a target: a :class:`~pdtrt.enums.Target` member; its data under
``pdtrt/data/targets/``; a module here with one ``TargetSupport`` subclass; its object in
``REGISTRY``; golden tests. No stage of pdtrt branches on the target.
"""
