"""Operator interfaces: the terminal commands (:mod:`pgagentstate.ui.commands`, one module per command group;
plain-text tables from :mod:`pgagentstate.ui.term`) and the timeline viewer, a small local web app
(:mod:`pgagentstate.ui.server`, started by ``pgagentstate ui``). Both read through
:mod:`pgagentstate.ops.operations`."""
