"""What every ``probes run`` folder shares, ordinary experiments and role-lab runs alike: the command names, the
status of an unfinished run, and the checks that claim a run folder (:func:`check_out`, :func:`mark_started`)."""

from __future__ import annotations

from pathlib import Path

from probes.errors import ConfigError, InputError
from probes.run_details import ExperimentInfo
from probes.run_record import RUN_FILE, RunRecord

__all__ = ["COMMAND", "REPORT_COMMAND", "UNFINISHED", "check_out", "mark_started"]

COMMAND = "probes run"
REPORT_COMMAND = "probes report"
#: The status of a run folder whose run has not finished (an interrupt, an error).
UNFINISHED = "unfinished: the units finished so far are in results/; run the same command again to resume"


def check_out(out: Path, name: str) -> None:
    """Refuse a run folder that holds something other than this experiment's runs."""
    from probes.reports.writer import out_dir_content
    if (out / RUN_FILE).is_file():
        try:
            previous = RunRecord.load(out)
        except InputError:
            previous = RunRecord()
        experiment = previous.details.run.experiment or ExperimentInfo()
        if previous.command not in (COMMAND, REPORT_COMMAND) or experiment.name != name:
            raise ConfigError(f"{out}: holds the output of {previous.command!r} "
                              f"({experiment.name if 'name' in experiment else 'another run'}); choose another --out")
    elif out_dir_content(out):  # a lock or temporary file left by a stopped run is no content
        raise ConfigError(f"{out}: output folder is not empty and holds no experiment run; choose another --out")


def mark_started(out: Path, name: str) -> None:
    """Mark a new run folder as this experiment's (``run.json`` without units), so an interrupted run resumes."""
    if not (out / RUN_FILE).is_file():
        RunRecord.of({"command": COMMAND, "experiment": {"name": name}, "status": UNFINISHED}).save(out / RUN_FILE)
