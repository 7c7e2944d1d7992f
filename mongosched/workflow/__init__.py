"""Durable workflows: functions whose steps run once, whose sleeps and waits free the
worker, and which a crash only delays (see :doc:`/workflows`).

A workflow is a job of a task registered with :meth:`App.workflow
<mongosched.App.workflow>`. At every wake-up its function runs from the top; each call
that must not happen twice (a step, a sleep's wake-up time, an event received, the jobs
a gather scheduled) takes the next position of the workflow's history, recorded in the
store's steps collection the first time and returned from it afterwards. The history
is read once per run (one query).

A sleep, a wait for an event or a gather that cannot return yet writes the workflow's
job back ``pending``, due when it is to wake up (its lease released, fenced on it as
every holder's write is), and frees the worker's thread. :meth:`send
<Workflows.send>` and the end of a gathered job make it due at once.

Outside a runner (a workflow called as a plain function, or in eager mode), a workflow
runs inline: its steps are plain calls, a sleep sleeps in the thread, a gather waits
for its jobs, and a wait for an event raises :class:`~mongosched.errors.WorkflowError`.
A workflow called inside another runs inline in it: its steps are the caller's. A step
called outside a workflow is a plain call.

Its modules: ``workflows`` (:class:`Workflows`, an app's: what its users call),
``step`` (:class:`Step`: a step's run, retries and transaction) and ``replay``
(:class:`~mongosched.workflow.replay.Replay`: one run against its history, and its
stop to wait).
"""

from mongosched.workflow.replay import patched
from mongosched.workflow.step import Step
from mongosched.workflow.workflows import Workflows

__all__ = ["Step", "Workflows", "patched"]
