"""Every configuration the emulator reads, as pydantic models, in one place.

    topology.py     topology files              (emulator.topo.build resolves them)
    experiment.py   experiment files            (emulator.experiment.model)
    workload.py     their workload: and storage: sections
    endpoints.py    their endpoints: section
    agent.py        the agent processes' JSON configs (host, collective, storage)
    nic.py          the one config of a NIC (fabric units), part of each agent's
    switch.py       the embedded switch process's JSON config
    load.py         the YAML loader and the one translator of validation errors
                    into ``ConfigError("FILE", "field.path", "reason")``

A process config is built by the runner and written with
``model_dump_json()``; the process reads the same model back
(``Model.load(path)``). Submodules are imported on demand: a switch process
needs only ``switch.py``.
"""
