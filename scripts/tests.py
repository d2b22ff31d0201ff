#!/usr/bin/env python3
"""The workspace's test runner: `make unit` (no cluster) and `make test` (everything).

    scripts/tests.py unit [-- ARGS]            cluster-free tests, one binary after another
    scripts/tests.py all [--jobs N] [--also NAME=COMMAND ...]
                                               every test binary, N at a time, and the commands

Both build with one `cargo test --workspace --no-run` (the same feature unification for both, so
they share target/), then run each test executable from its package's directory with
CARGO_MANIFEST_DIR set, as `cargo test` runs it, and the doc tests. ARGS after `--` go to every
test binary (e.g. a name filter).

`all` runs the test binaries N at a time (default 3) instead of one after another as `cargo test`
does: most of a cluster test's time is spent waiting on kube-apiservers, Pods and timeouts, not
on the CPU, so binaries overlap well even on 2 cores. The longest binaries start first (LONGEST),
each binary's output goes to a log under target/test-logs/ and is printed whole when it fails.
`--also NAME=COMMAND` adds a shell command (e.g. the fuzz smoke run) to the same pool.

Which binaries need a cluster is stated, not guessed: every integration test binary of the
workspace is listed either in UNIT_TESTS (starts no kube-apiserver) or in CLUSTER_TESTS; one in
neither list fails both modes until it is classified, so none is skipped silently.
"""

import concurrent.futures
import json
import os
import subprocess
import sys
import threading
import time

# package:test-target
UNIT_TESTS = [
    "charts:charts",
    "cloudflare-api:against_double",
    "cloudflare-double:binary",
    "cloudflare-double:edge",
    "cloudflare-double:raw_http",
    "oci-image:layout",
    "resource-proxy:early_answers",
    "resource-proxy:fake_target",
    "resource-proxy:peer_health",
    "resource-proxy:peer_source",
    "test-cluster:netns",
    "tunnel-controller:model",
    "tunnel-controller:push",
    "tunnel-controller:verify_claim",
    "tunnel-proxy:it",
]
CLUSTER_TESTS = [
    "charts:install",
    "demo:demo",
    "demo:manifests",
    "kube-support:it",
    # No cluster, but root (chroot) and the images `make images-test` builds, which `make test`
    # does first.
    "oci-image:images",
    "resource-proxy:e2e",
    "resource-proxy:on_node",
    "resource-proxy:owner_label_policy",
    "resource-proxy:peers_e2e",
    "resource-proxy:wiring",
    "test-cluster:harness",
    "test-cluster:node",
    "tunnel-controller:crds",
    "tunnel-controller:gateway_e2e",
    "tunnel-controller:hostname_policy",
    "tunnel-controller:install",
    "tunnel-controller:on_node",
    "tunnel-controller:render_apply",
]
# Started first in `all`, longest first (seconds measured on the 2-core machine, one at a time;
# `--also` jobs by their NAME), so that the pool does not end waiting on one long job started last.
LONGEST = [
    "tunnel-controller:on_node",  # 510
    "conformance",  # 240, and the driver's Go build (4 min) on a fresh machine
    "tunnel-controller:gateway_e2e",  # 300
    "fuzz-smoke",  # 170-240, and the instrumented build on a fresh machine
    "resource-proxy:e2e",  # 160
    "resource-proxy:resource_proxy",  # 110 (the unit tests)
    "resource-proxy:peers_e2e",  # 68
    "demo:demo",  # 57
    "resource-proxy:on_node",  # 57
    "test-cluster:node",  # 49
]

CARGO = os.environ.get("CARGO", "cargo")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOG_DIR = os.path.join(ROOT, "target", "test-logs")
# How much of a failed job's log is repeated after the summary of all jobs.
TAIL_LINES = 40


def die(message):
    print(f"tests: {message}", file=sys.stderr)
    sys.exit(1)


def check_classification():
    """Fails unless every integration test binary is in exactly one list; returns the workspace's
    packages by manifest path."""
    metadata = json.loads(
        subprocess.run(
            [CARGO, "metadata", "--no-deps", "--format-version", "1", "--locked"],
            check=True,
            stdout=subprocess.PIPE,
        ).stdout
    )
    actual = {
        f"{p['name']}:{t['name']}"
        for p in metadata["packages"]
        for t in p["targets"]
        if "test" in t["kind"]
    }
    listed = UNIT_TESTS + CLUSTER_TESTS
    twice = {t for t in listed if listed.count(t) > 1}
    if twice:
        die(f"listed twice in scripts/tests.py: {sorted(twice)}")
    unlisted, gone = actual - set(listed), set(listed) - actual
    if unlisted or gone:
        die(
            "scripts/tests.py's lists and the workspace's test binaries differ: "
            f"not listed {sorted(unlisted)}, no longer there {sorted(gone)}. Put each test binary "
            "in UNIT_TESTS (it starts no cluster) or CLUSTER_TESTS."
        )
    return {p["manifest_path"]: p["name"] for p in metadata["packages"]}


def build(packages, wanted):
    """Builds the test executables; returns [(label, executable, package dir)].

    `wanted` is the set of integration test binaries to build, or None for all of them (and the
    bins and examples `cargo test` builds with them)."""
    cmd = [CARGO, "test", "--workspace", "--locked", "--no-run"]
    if wanted is not None:
        cmd += ["--lib", "--bins"]
        for name in sorted({t.split(":", 1)[1] for t in wanted}):
            cmd += ["--test", name]
    cmd += ["--message-format", "json-render-diagnostics"]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.exit(proc.returncode)
    runs = []
    for line in proc.stdout.splitlines():
        msg = json.loads(line)
        if msg.get("reason") != "compiler-artifact" or not msg.get("executable"):
            continue
        if not msg["profile"]["test"]:
            continue
        package = packages[msg["manifest_path"]]
        target = msg["target"]
        label = f"{package}:{target['name']}"
        if wanted is not None and "test" in target["kind"] and label not in wanted:
            continue  # a cluster test binary that shares a name with a listed one
        kind = "/".join(target["kind"])
        runs.append((label, kind, msg["executable"], os.path.dirname(msg["manifest_path"])))
    return runs


def run_binary(executable, package_dir, args, **kwargs):
    env = dict(os.environ, CARGO_MANIFEST_DIR=package_dir)
    return subprocess.run([executable, *args], cwd=package_dir, env=env, **kwargs).returncode


def doc_tests(args, **kwargs):
    return subprocess.run(
        [CARGO, "test", "--workspace", "--locked", "--doc", "--", *args], **kwargs
    ).returncode


def unit(args):
    packages = check_classification()
    start = time.monotonic()
    runs = build(packages, set(UNIT_TESTS))
    failed = []
    for label, kind, executable, package_dir in runs:
        print(f"== {label} ({kind})", flush=True)
        if run_binary(executable, package_dir, args) != 0:
            failed.append(label)
    print("== doc tests", flush=True)
    if doc_tests(args) != 0:
        failed.append("doc tests")
    took = time.monotonic() - start
    if failed:
        die(f"failed: {', '.join(failed)} ({took:.0f}s)")
    print(f"tests: {len(runs)} test binaries and the doc tests passed in {took:.0f}s")


def all_tests(jobs, also):
    packages = check_classification()
    start = time.monotonic()
    runs = build(packages, None)
    print(f"tests: built in {time.monotonic() - start:.0f}s", flush=True)
    os.makedirs(LOG_DIR, exist_ok=True)

    # (name, function of the log file returning an exit code)
    work = []
    for label, kind, executable, package_dir in runs:
        name = f"{label} ({kind})"
        work.append(
            (name, label, lambda log, e=executable, d=package_dir: run_binary(e, d, [], stdout=log, stderr=subprocess.STDOUT))
        )
    work.append(("doc tests", "", lambda log: doc_tests([], stdout=log, stderr=subprocess.STDOUT)))
    for spec in also:
        name, _, command = spec.partition("=")
        if not command:
            die(f"--also wants NAME=COMMAND, not {spec!r}")
        work.append((name, name, lambda log, c=command: subprocess.run(c, shell=True, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT).returncode))
    rank = {label: i for i, label in enumerate(LONGEST)}
    work.sort(key=lambda w: rank.get(w[1], len(LONGEST)))

    lock = threading.Lock()
    failed = []  # (name, log path)

    def one(item):
        name, _, job = item
        log_path = os.path.join(LOG_DIR, name.replace("/", "_").replace(" ", "_") + ".log")
        began = time.monotonic()
        with open(log_path, "w") as log:
            code = job(log)
        took = time.monotonic() - began
        with lock:
            if code == 0:
                print(f"== ok     {took:6.0f}s  {name}", flush=True)
            else:
                failed.append((name, log_path))
                print(f"== FAILED {took:6.0f}s  {name} (exit {code}); its output ({log_path}):", flush=True)
                with open(log_path) as log:
                    sys.stdout.write(log.read())
                print(f"== end of {name}", flush=True)

    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(one, work))
    took = time.monotonic() - start
    if failed:
        # Printed whole above, between other jobs' lines; the ends again here, where a reader
        # of only the last screen (a CI summary) sees them.
        for name, log_path in failed:
            print(f"== the last {TAIL_LINES} lines of {name} ({log_path}):")
            with open(log_path, errors="replace") as log:
                sys.stdout.writelines(log.readlines()[-TAIL_LINES:])
        die(f"failed: {', '.join(name for name, _ in failed)} ({took:.0f}s)")
    print(f"tests: {len(work)} jobs passed in {took:.0f}s ({jobs} at a time)")


def main():
    args = sys.argv[1:]
    mode = args.pop(0) if args else "unit"
    if mode == "unit":
        if args[:1] == ["--"]:
            args = args[1:]
        unit(args)
    elif mode == "all":
        jobs, also = 3, []
        while args:
            flag = args.pop(0)
            if flag == "--jobs" and args:
                jobs = int(args.pop(0))
            elif flag == "--also" and args:
                also.append(args.pop(0))
            else:
                die(f"unknown argument {flag!r} (see the script's doc)")
        all_tests(jobs, also)
    else:
        die(f"unknown mode {mode!r}: unit or all")


if __name__ == "__main__":
    main()
