"""Command line of the compendium: ``compendium run|publish|list|claims|trace`` (also ``python -m compendium``).

``compendium run`` executes notebooks into a new run folder ``build/runs/<UTC time>-<profile>-s<seed>/``
and never writes into ``papers/``; ``compendium run --publish`` (what ``make all`` calls) then
copies the completed notebooks' results and figures into ``papers/`` and rebuilds the claims tables.
``--paper P`` runs (and publishes) the notebooks of one paper only (``make all PAPER=P``).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from compendium import claims, paths, profiles, runner, runs


def _parse_param(text: str) -> tuple[str, str]:
    """NAME=VALUE as (NAME, the text VALUE): converted later to the type of the notebook's own value."""
    key, eq, raw = text.partition("=")
    if not eq or not key.strip():
        raise argparse.ArgumentTypeError(f"parameters look like NAME=VALUE, got {text!r}")
    return key.strip(), raw


def _seed(text: str) -> int:
    try:
        return runner.check_seed(int(text))
    except ValueError as err:
        big = text.strip().isdigit() and int(text) > runs.MAX_SEED
        raise argparse.ArgumentTypeError(str(err) if big else
                                         f"the seed must be a non-negative integer, got {text!r}") from None


def _jobs(text: str) -> int:
    from compendium import parallel

    try:
        return parallel.check_jobs(int(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--jobs takes a whole number >= 1, got {text!r}") from None


def publish_allowed(profile: str) -> frozenset[str]:
    from compendium import publish

    return publish.ALLOWED_OVERRIDES.get(profile, frozenset())


def _profile(text: str) -> str:
    try:
        return profiles.check(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _device(text: str) -> str:
    try:
        return profiles.check_device(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _summary(todo: list[str], run_dir: Path) -> tuple[str, int]:
    status = runs.read_status(run_dir)
    lines = [f"summary of run {paths.display(run_dir)}:"]
    n_failed = 0
    for name in todo:
        e = status.get(name, {"status": runs.NOT_RUN})
        st = e.get("status", "?")
        n_failed += st != runs.COMPLETED
        secs = f"{e['seconds']:.0f} s" if e.get("seconds") is not None else ""
        shown = f"{st}: {e['reason']}" if st == runs.FAILED and e.get("reason") else st  # failed: disk full
        lines.append(f"  {shown:10s} {name:36s} {secs}")
        if st == runs.FAILED and e.get("error"):
            lines.append("             " + e["error"].splitlines()[0])
    done = sum(status.get(n, {}).get("status") == runs.COMPLETED for n in todo)
    lines.append(f"{done} of {len(todo)} notebook(s) completed")
    return "\n".join(lines), n_failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="compendium", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)

    p_run = sub.add_parser("run", help="execute notebooks with papermill into a run folder (default: all of them)")
    p_run.add_argument("names", nargs="*", help="notebook names (e.g. 00_tour, accpp/01_ioi, or a unique part)")
    p_run.add_argument("--paper", default=None, help="run every notebook of this paper (e.g. accpp) and nothing "
                                                     "else; with --publish, publish that paper alone")
    p_run.add_argument("--profile", type=_profile, default=profiles.DEFAULT, help=f"one of {', '.join(profiles.PROFILES)}")
    p_run.add_argument("--seed", type=_seed, default=0, help="an integer from 0 to 2**32 - 1")
    p_run.add_argument("--device", type=_device, default="cpu", help="cpu, cuda or cuda:N")
    p_run.add_argument("-p", "--param", type=_parse_param, action="append", default=[],
                       help="another parameter of the notebook's parameters cell, NAME=VALUE (VALUE converted to "
                            "the type of the cell's own value: int, float, bool, str, JSON); PROFILE, SEED and "
                            "DEVICE are set with their own options. A run with one is never published")
    p_run.add_argument("--output", default=None, help="folder for the executed notebooks (default <run>/notebooks; "
                                                      "never a folder of the repository's sources or tracked files)")
    p_run.add_argument("--keep-going", action="store_true", help="run the rest after a failure")
    p_run.add_argument("--jobs", type=_jobs, default=1,
                       help="run this many notebooks at once, each in its own process with one thread (default 1; "
                            "make all passes the machine's cores); the values recorded are those of a run of one")
    p_run.add_argument("--resume", metavar="RUN_DIR", default=None,
                       help="continue an interrupted run in its own folder, with its own notebooks, profile, seed, "
                            "device and parameters: completed notebooks are kept when code, data, models and "
                            "libraries are as the run recorded (refused otherwise, naming what changed), the "
                            "others run again")
    p_run.add_argument("--publish", action="store_true",
                       help="afterwards, if every notebook (of --paper's paper) completed, publish the run into "
                            "papers/ and rebuild the claims tables (make all does)")
    p_run.add_argument("--publish-figures", dest="publish", action="store_true", help=argparse.SUPPRESS)
    p_run.add_argument("--no-claims", action="store_true", help=argparse.SUPPRESS)  # obsolete, accepted

    p_pub = sub.add_parser("publish", help="publish the run folder of a complete main run (as run --publish does)")
    p_pub.add_argument("run_dir", help="a run folder, e.g. build/runs/20261130T081244Z-paper-s0")
    p_pub.add_argument("--paper", default=None, help="publish only this paper, from a run in which all its notebooks "
                                                     "completed (default: the run's own --paper, else every paper)")
    p_list = sub.add_parser("list", help="list the notebooks")
    p_list.add_argument("--paper", default=None, help="only the notebooks of this paper (what run --paper runs)")
    sub.add_parser("claims", help="rebuild papers/*/CLAIMS.md and papers/*/figures/verdict_board.png from the "
                                  "published results")
    from accpp import trace_cli  # `compendium trace`: its options and its run live in accpp.trace_cli

    trace_cli.add_parser(sub)

    args = parser.parse_args(argv)
    if args.cmd == "trace":
        return trace_cli.run(args)
    if args.cmd == "list":
        try:
            names = runner.paper_notebooks(args.paper) if args.paper else runner.list_notebooks()
        except ValueError as err:
            parser.error(str(err))
        for name in names:
            print(name)
        return 0
    if args.cmd == "claims":
        from compendium import publish

        try:
            written = publish.write_claims()
        except (publish.PublishError, ValueError) as err:
            print(f"compendium claims: {err}", file=sys.stderr)
            return 1
        for path in written:
            print(f"wrote {paths.display(path)}")
        return 0
    if args.cmd == "publish":
        return _publish(Path(args.run_dir), args.paper)

    if args.resume:
        return _resume(parser, args)
    if args.paper and args.names:
        parser.error(f"--paper runs every notebook of paper {args.paper!r}: drop the notebook names, or drop --paper")
    if args.publish and args.names:
        parser.error("--publish writes the ledger in papers/, which only a complete main run may do: drop the "
                     "notebook names, or give --paper P to run and publish one paper's notebooks (run names "
                     "without --publish to check them; their results stay in build/runs/)")
    if args.publish and any(k not in publish_allowed(args.profile) for k, _ in args.param):
        parser.error("--publish writes the ledger in papers/, which only a run at default parameters may do: drop "
                     "the -p options (run without --publish to try them; their results stay in build/runs/)")
    try:
        todo = (runner.paper_notebooks(args.paper) if args.paper
                else [runner.resolve(n) for n in args.names] or runner.list_notebooks())
        parameters = runner.convert_parameters(todo, dict(args.param))
        if args.output:
            paths.check_output(args.output)
    except ValueError as err:
        parser.error(str(err))
    try:
        run_dir = runs.create(args.profile, args.seed, device=args.device, parameters=parameters, notebooks=todo,
                              command=["compendium", *(sys.argv[1:] if argv is None else argv)], paper=args.paper)
    except OSError as err:  # a full disk, a read-only build/: nothing ran
        print(f"compendium run: cannot make a run folder in {paths.display(paths.runs_dir())}: "
              f"{runs.write_problem(err)}; nothing ran", file=sys.stderr)
        return 1
    of = f" of paper {args.paper}" if args.paper else ""
    print(f"running {len(todo)} notebook(s){of} at profile '{args.profile}', seed {args.seed}, device {args.device}\n"
          f"run folder: {paths.display(run_dir)}", flush=True)
    return _execute(args, todo, run_dir, profile=args.profile, seed=args.seed, device=args.device,
                    parameters=parameters, paper=args.paper)


def _resume(parser, args) -> int:
    """``compendium run --resume RUN_DIR``: the run's own notebooks and settings, the unfinished ones again."""
    from compendium import resume

    given = [flag for flag, on in (("notebook names", args.names), ("--paper", args.paper),
                                   ("--profile", args.profile != profiles.DEFAULT), ("--seed", args.seed != 0),
                                   ("--device", args.device != "cpu"), ("-p", args.param), ("--output", args.output))
             if on]
    if given:
        parser.error(f"--resume continues a run with its own notebooks and settings: drop {', '.join(given)}")
    try:
        params, keep, again = resume.plan(Path(args.resume))
    except resume.ResumeRefused as err:
        print(f"compendium run: {err}", file=sys.stderr)
        return 1
    run_dir = Path(args.resume).resolve()
    if args.publish and params.get("parameters"):
        parser.error("--publish writes the ledger in papers/, which only a run at default parameters may do; this "
                     f"run was started with {params['parameters']}")
    resume.record(run_dir, keep, again)
    print(f"resuming run {paths.display(run_dir)} at profile '{params['profile']}', seed {params['seed']}, device "
          f"{params['device']}: {len(keep)} notebook(s) kept, {len(again)} to run"
          + (f" ({', '.join(again)})" if again else ""), flush=True)
    return _execute(args, params["notebooks"], run_dir, profile=params["profile"], seed=params["seed"],
                    device=params["device"], parameters=params.get("parameters") or {}, paper=params.get("paper"),
                    only=again)


def _execute(args, todo: list[str], run_dir: Path, *, profile: str, seed: int, device: str, parameters: dict,
             paper: str | None, only: list[str] | None = None) -> int:
    """Run ``only`` (default: every notebook of ``todo``) into ``run_dir``, print the summary of ``todo``,
    then publish when asked; the exit code."""
    interrupted, stopped = "", ""
    n_failed = 0
    try:
        if only is None or only:
            runner.run_many(todo if only is None else only, keep_going=args.keep_going, run_dir=run_dir,
                            profile=profile, seed=seed, device=device, parameters=parameters, jobs=args.jobs,
                            output_dir=Path(args.output) if args.output else None)
    except KeyboardInterrupt as err:  # Ctrl-C, or SIGTERM (runner.Terminated)
        interrupted = "terminated (SIGTERM)" if isinstance(err, runner.Terminated) else "interrupted"
    except runs.RunFolderError as err:  # status.json could not be written: stop, say where and why
        stopped = str(err)
    finally:
        text, n_failed = _summary(todo, run_dir)
        print(text, flush=True)
    if interrupted:
        print(f"{interrupted}: nothing published", file=sys.stderr)
        return 143 if interrupted.startswith("terminated") else 130
    if stopped:
        print(f"compendium run: stopped: {stopped}; nothing published", file=sys.stderr)
        return 1
    if args.publish:
        code = _publish(run_dir, paper)
        if code:
            return code
    return 1 if n_failed else 0


def _publish(run_dir: Path, paper: str | None = None) -> int:
    """Publish ``run_dir`` (only ``paper``, when given); a refusal or a stop is printed (papers/
    unchanged) and returns 1."""
    from compendium import atomic, publish, tables

    try:
        print(publish.publish(run_dir, paper).summary())
    except (publish.PublishError, tables.ResultsFileError, atomic.JSONFileError) as err:
        print(f"not published: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
