#!/usr/bin/env python3
"""Checks a rendered overlay (kubectl kustomize output) for what the runners and
sandbox-mcp must have beyond what the API schemas say: the runner workload, privileged,
with its readiness (/health) and liveness (/health/live) probes and a grace period longer
than its drain; the headless Service selecting it; the tokens from the generated Secret;
the NetworkPolicy that lets only sandbox-mcp in; the disruption budgets.

Usage: check-rendered.py RENDERED.yaml   (exit 1 and a line per problem when one fails)
"""
import sys

import yaml

RUNNER = "sandbox-runner"
MCP = "sandbox-mcp"
GRACE_MS_DEFAULT = 30000


def objects(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def env_of(container):
    return {e["name"]: e for e in container.get("env", [])}


def check(docs):
    problems = []
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)
    secrets = {s["metadata"]["name"] for s in by_kind.get("Secret", [])}

    workloads = [
        d
        for kind in ("Deployment", "DaemonSet")
        for d in by_kind.get(kind, [])
        if d["spec"]["template"]["metadata"]["labels"].get("app.kubernetes.io/name") == RUNNER
    ]
    if len(workloads) != 1:
        problems.append(f"expected one runner workload, found {len(workloads)}")
    for w in workloads:
        pod = w["spec"]["template"]["spec"]
        (c,) = [c for c in pod["containers"] if c["name"] == RUNNER]
        if c.get("securityContext", {}).get("privileged") is not True:
            problems.append("runner container is not privileged")
        if c.get("readinessProbe", {}).get("httpGet", {}).get("path") != "/health":
            problems.append("runner readinessProbe is not GET /health")
        if c.get("livenessProbe", {}).get("httpGet", {}).get("path") != "/health/live":
            problems.append("runner livenessProbe is not GET /health/live")
        env = env_of(c)
        grace_ms = int(env.get("RUNNER_SHUTDOWN_GRACE_MS", {}).get("value", GRACE_MS_DEFAULT))
        if pod.get("terminationGracePeriodSeconds", 30) * 1000 <= grace_ms:
            problems.append("runner terminationGracePeriodSeconds is not above RUNNER_SHUTDOWN_GRACE_MS")
        if env.get("RUNNER_LISTEN", {}).get("value", "").split(":")[0] != "0.0.0.0":
            problems.append("runner does not listen on all interfaces")
        problems += token_problems(c, "SANDBOX_RUNNER_TOKEN", secrets)
        if env.get("RUNNER_BACKEND", {}).get("value") == "vm":
            mounts = {m["mountPath"] for m in c.get("volumeMounts", [])}
            if "/dev/kvm" not in mounts:
                problems.append("vm backend runner without /dev/kvm")

    mcps = [d for d in by_kind.get("Deployment", []) if d["metadata"]["name"] == MCP]
    if len(mcps) != 1:
        problems.append("no sandbox-mcp Deployment")
    for m in mcps:
        (c,) = m["spec"]["template"]["spec"]["containers"]
        env = env_of(c)
        url = env.get("SANDBOX_RUNNER_URL", {}).get("value", "")
        if "sandbox-runner-headless" not in url:
            problems.append(f"sandbox-mcp's SANDBOX_RUNNER_URL {url!r} is not the headless Service")
        problems += token_problems(c, "MCP_AUTH_TOKEN", secrets)
        problems += token_problems(c, "SANDBOX_RUNNER_TOKEN", secrets)

    headless = [s for s in by_kind.get("Service", []) if s["spec"].get("clusterIP") == "None"]
    if not any(s["spec"]["selector"].get("app.kubernetes.io/name") == RUNNER for s in headless):
        problems.append("no headless Service selecting the runners")

    policies = [
        p
        for p in by_kind.get("NetworkPolicy", [])
        if p["spec"]["podSelector"].get("matchLabels", {}).get("app.kubernetes.io/name") == RUNNER
    ]
    if not policies:
        problems.append("no NetworkPolicy on the runners")
    for p in policies:
        for rule in p["spec"].get("ingress", []):
            if not rule.get("from"):
                problems.append(f"NetworkPolicy {p['metadata']['name']} admits every peer")
            for peer in rule.get("from", []):
                pods = peer.get("podSelector", {}).get("matchLabels", {}).get("app.kubernetes.io/name")
                namespaces = peer.get("namespaceSelector", {}).get("matchLabels", {})
                # sandbox-mcp's pods, or (for /metrics) the monitoring namespace.
                if pods != MCP and namespaces != {"kubernetes.io/metadata.name": "monitoring"}:
                    problems.append(f"NetworkPolicy {p['metadata']['name']} admits {peer}")

    budgets = {
        b["spec"]["selector"]["matchLabels"].get("app.kubernetes.io/name")
        for b in by_kind.get("PodDisruptionBudget", [])
    }
    for name in (RUNNER, MCP):
        if name not in budgets:
            problems.append(f"no PodDisruptionBudget for {name}")
    return problems


def token_problems(container, name, secrets):
    ref = env_of(container).get(name, {}).get("valueFrom", {}).get("secretKeyRef")
    if not ref:
        return [f"{container['name']}: {name} does not come from a Secret"]
    if ref["name"] not in secrets:
        return [f"{container['name']}: {name} names Secret {ref['name']}, which the overlay lacks"]
    return []


def main():
    problems = check(objects(sys.argv[1]))
    for p in problems:
        print(f"{sys.argv[1]}: {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
