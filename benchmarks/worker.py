"""Run one measurement: ``python -m benchmarks.worker '<task json>'``.

The task names a module of this package and a function in it; the function
returns a record (or a list of records), printed on one line each for the
parent to collect. Threads are pinned before any runtime is imported.
"""

import importlib
import json
import sys
import traceback

from benchmarks import common


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    task = json.loads(argv[0])
    common.pin_threads(task.get("threads", 2))
    try:
        module = importlib.import_module(f"benchmarks.{task['module']}")
        result = getattr(module, task["function"])(task)
    except Exception as error:  # reported as an error record, the suite goes on
        traceback.print_exc()
        common.emit(common.make_record(task, status="error", error=f"{type(error).__name__}: {error}"[:500]))
        return 1
    for record in result if isinstance(result, list) else [result]:
        common.emit(record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
