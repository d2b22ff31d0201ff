#!/usr/bin/env python3
"""`make unit`: every test that needs no cluster, in one cargo build.

Runs the unit tests of every crate (lib and bin targets), the doc tests, and the integration test
binaries listed in UNIT_TESTS. The binaries in CLUSTER_TESTS start real etcd + kube-apiservers;
they run only in `make test`. Every integration test binary of the workspace must be listed in
exactly one of the two lists: a new one fails this script until it is classified, so none is
skipped silently.

The selected tests are built by one `cargo test --workspace --no-run` (the same feature
unification as `make test`, so both share target/), then each test executable runs from its
package's directory, as `cargo test` runs it. Arguments after `--` go to every test binary (e.g.
a name filter).
"""

import json
import os
import subprocess
import sys
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

CARGO = os.environ.get("CARGO", "cargo")


def die(message):
    print(f"unit-tests: {message}", file=sys.stderr)
    sys.exit(1)


def check_classification():
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
        die(f"listed twice in scripts/unit-tests.py: {sorted(twice)}")
    unlisted, gone = actual - set(listed), set(listed) - actual
    if unlisted or gone:
        die(
            "scripts/unit-tests.py's lists and the workspace's test binaries differ: "
            f"not listed {sorted(unlisted)}, no longer there {sorted(gone)}. Put each test binary "
            "in UNIT_TESTS (it starts no cluster) or CLUSTER_TESTS."
        )
    return {p["manifest_path"]: p["name"] for p in metadata["packages"]}


def build(packages):
    """Builds lib, bin and the listed test targets; returns [(label, executable, package dir)].

    `packages` maps each workspace manifest path to its package name."""
    names = sorted({t.split(":", 1)[1] for t in UNIT_TESTS})
    cmd = [CARGO, "test", "--workspace", "--locked", "--no-run", "--lib", "--bins"]
    for name in names:
        cmd += ["--test", name]
    cmd += ["--message-format", "json-render-diagnostics"]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.exit(proc.returncode)
    wanted = set(UNIT_TESTS)
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
        if "test" in target["kind"] and label not in wanted:
            continue  # a cluster test binary that shares a name with a listed one
        kind = "/".join(target["kind"])
        package_dir = os.path.dirname(msg["manifest_path"])
        runs.append((f"{label} ({kind})", msg["executable"], package_dir))
    return runs


def main():
    args = sys.argv[1:]
    if args[:1] == ["--"]:
        args = args[1:]
    packages = check_classification()
    start = time.monotonic()
    runs = build(packages)
    failed = []
    for label, executable, package_dir in runs:
        print(f"== {label}", flush=True)
        env = dict(os.environ, CARGO_MANIFEST_DIR=package_dir)
        if subprocess.run([executable, *args], cwd=package_dir, env=env).returncode != 0:
            failed.append(label)
    print("== doc tests", flush=True)
    if subprocess.run([CARGO, "test", "--workspace", "--locked", "--doc", "--", *args]).returncode != 0:
        failed.append("doc tests")
    took = time.monotonic() - start
    if failed:
        die(f"failed: {', '.join(failed)} ({took:.0f}s)")
    print(f"unit-tests: {len(runs)} test binaries and the doc tests passed in {took:.0f}s")


if __name__ == "__main__":
    main()
