"""The deployment templates in docs/deploy/ hang together. No Docker, cloud or Kubernetes here, so
this checks their structure: the Dockerfile's bases, installs, COPY sources and entry command; the
launcher config against the installed Ray's own schema; the RayCluster's fields; one Ray version
(the pin in constraints.txt) and one image everywhere; the documented commands parse with today's
CLI and write the store where the head keeps it; and they are documentation, not package data."""

import importlib.util
import json
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "docs" / "deploy"
DOCKERFILE = DEPLOY / "Dockerfile"
LAUNCHER = DEPLOY / "ray-cluster.yaml"
KUBERAY = DEPLOY / "kuberay.yaml"
RAY_TAG = re.compile(r"^(?P<ray>\d+\.\d+\.\d+)-py(?P<py>\d+)-(?P<platform>cpu|cu\d+)$")


def _pin(name: str) -> str:
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        req = line.split("#")[0].strip()
        if req.lower().startswith(f"{name}=="):
            return req.split("==")[1]
    raise AssertionError(f"constraints.txt pins no {name}")


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments dropped."""
    out, pending = [], ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue  # Docker drops comment lines inside continuations too
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        keyword, _, args = (pending + line).partition(" ")
        out.append((keyword.upper(), args.strip()))
        pending = ""
    assert not pending, "the Dockerfile ends inside a continuation line"
    return out


def _stages() -> tuple[dict[str, str], str, str]:
    """({stage name: base image}, the final FROM's argument, the global ARG VARIANT default)."""
    stages, final, variant = {}, None, None
    for keyword, args in _instructions():
        if keyword == "ARG" and final is None and not stages and args.startswith("VARIANT="):
            variant = args.split("=", 1)[1]
        if keyword == "FROM":
            parts = args.split()
            if len(parts) == 3 and parts[1].upper() == "AS":
                stages[parts[2]] = parts[0]
            final = parts[0]
    assert variant is not None, "the Dockerfile declares no global ARG VARIANT=<default> before its FROM lines"
    return stages, final, variant


def _stage_instructions(stage: str) -> list[tuple[str, str]]:
    out, current = [], None
    for keyword, args in _instructions():
        if keyword == "FROM":
            parts = args.split()
            current = parts[2] if len(parts) == 3 else None
        elif current == stage:
            out.append((keyword, args))
    return out


def _launcher() -> dict:
    return yaml.safe_load(LAUNCHER.read_text())


def _kuberay() -> tuple[dict, list[dict]]:
    """(the RayCluster, every other document)."""
    docs = [d for d in yaml.safe_load_all(KUBERAY.read_text()) if d]
    clusters = [d for d in docs if d.get("kind") == "RayCluster"]
    assert len(clusters) == 1, f"kuberay.yaml holds {len(clusters)} RayCluster documents, expected 1"
    return clusters[0], [d for d in docs if d is not clusters[0]]


def _pod_specs(cluster: dict) -> dict[str, dict]:
    spec = cluster["spec"]
    pods = {"head": spec["headGroupSpec"]["template"]["spec"]}
    for group in spec["workerGroupSpecs"]:
        pods[group["groupName"]] = group["template"]["spec"]
    return pods


def _image_tag(image: str) -> tuple[str, str]:
    repo, sep, tag = image.rpartition(":")
    assert sep and "/" not in tag, f"image {image!r} has no tag; pin one (it names the Ray version)"
    return repo, tag


# ------------------------------------------------------------------------------------ Dockerfile
def test_dockerfile_bases_are_ray_images_of_the_pinned_ray_and_python_311():
    ray = _pin("ray")
    stages, final, default = _stages()
    platforms = {}
    for name, image in stages.items():
        repo, tag = _image_tag(image)
        assert repo == "rayproject/ray", f"stage {name} starts from {image}, not a rayproject/ray image"
        m = RAY_TAG.match(tag)
        assert m, f"stage {name}: tag {tag!r} is not <ray>-py<xy>-<cpu|cuXYZ> (rayproject/ray's format)"
        assert m["ray"] == ray, f"stage {name} starts from Ray {m['ray']}, constraints.txt pins ray=={ray}"
        assert m["py"] == "311", f"stage {name} starts from py{m['py']}, the project's images use Python 3.11"
        platforms[name] = m["platform"]
    assert default == "cpu", f"ARG VARIANT defaults to {default!r}; the plain build should be the cpu one"
    for variant in ("cpu", "cuda"):
        stage = final.replace("${VARIANT}", variant).replace("$VARIANT", variant)
        assert stage in stages, f"--build-arg VARIANT={variant}: the last FROM ({final}) names no stage {stage!r}"
        want = "cpu" if variant == "cpu" else "cu"
        assert platforms[stage].startswith(want), f"VARIANT={variant} builds on {stages[stage]}"
    checks = re.findall(r"ray\.__version__ == '([^']+)'", DOCKERFILE.read_text())
    assert checks == [ray], f"the build's Ray check expects {checks}, constraints.txt pins ray=={ray}"


def test_dockerfile_installs_the_extras_with_constraints_and_cpu_torch_on_cpu():
    runs = [args for keyword, args in _instructions() if keyword == "RUN" and "pip install" in args]
    assert runs, "no RUN pip install in the Dockerfile"
    installs = [cmd for run in runs for cmd in run.split("&&") if "pip install" in cmd]
    unconstrained = [cmd.strip() for cmd in installs if "-c constraints.txt" not in cmd]
    assert not unconstrained, f"pip installs without -c constraints.txt: {unconstrained}"
    extras = re.findall(r"\.\[([\w,]+)\]", " ".join(installs))
    assert extras, "no pip install of the project itself ('.[extras]')"
    known = set(_pyproject()["project"]["optional-dependencies"])
    for name in ("finance", "locomotion", "cluster"):
        assert name in extras[0].split(","), f"the image installs .[{extras[0]}], missing the {name} extra"
    assert set(extras[0].split(",")) <= known, f".[{extras[0]}] names extras pyproject.toml lacks ({sorted(known)})"
    _, final, _ = _stages()
    cpu, cuda = (" ".join(args for _, args in _stage_instructions(final.replace("${VARIANT}", v)))
                 for v in ("cpu", "cuda"))
    assert "download.pytorch.org/whl/cpu" in cpu, "the cpu stage does not take torch from the CPU index"
    assert "download.pytorch.org/whl/cpu" not in cuda, "the cuda stage takes torch from the CPU index"


def test_dockerfile_copies_existing_paths_and_every_package():
    copied = []
    for keyword, args in _instructions():
        if keyword in ("COPY", "ADD"):
            words = json.loads(args) if args.startswith("[") else shlex.split(args)
            sources = [w for w in words[:-1] if not w.startswith("--")]
            for src in sources:
                assert (ROOT / src).exists(), f"COPY {src}: no such path in the repository (the build context)"
            copied += [src.rstrip("/") for src in sources]
    project = _pyproject()
    needed = {"pyproject.toml", "constraints.txt", project["project"]["readme"]}
    needed |= {p.name for pattern in project["tool"]["setuptools"]["packages"]["find"]["include"]
               for p in ROOT.glob(pattern) if (p / "__init__.py").exists()}
    missing = sorted(needed - set(copied))
    assert not missing, f"the image misses {missing}: pip install needs them (packages, readme, constraints)"


def test_dockerfile_entry_command_is_a_console_script_that_runs():
    entry = [args for keyword, args in _instructions() if keyword == "ENTRYPOINT"]
    assert not entry, "ENTRYPOINT set: it would swallow the `ray start ...` that ray up and KubeRay run in the image"
    users = [args for keyword, args in _instructions() if keyword == "USER"]
    assert users in ([], ["ray"]), f"USER {users}: the launchers expect the base image's user, ray"
    cmds = [args for keyword, args in _instructions() if keyword == "CMD"]
    assert cmds, "no CMD in the Dockerfile"
    cmd = json.loads(cmds[-1])  # exec form; shell form would fail here, on purpose
    scripts = _pyproject()["project"]["scripts"]
    assert cmd[0] in scripts, f"CMD runs {cmd[0]!r}, which is no [project.scripts] entry ({sorted(scripts)})"
    exe = Path(sys.executable).parent / cmd[0]
    assert exe.exists(), f"{exe} missing: install the package (pip install -e .) to run this test"
    result = subprocess.run([str(exe), *cmd[1:]], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, f"CMD {cmd} exits {result.returncode}: {result.stderr[-2000:]}"


# --------------------------------------------------------------------------- cluster launcher
def test_launcher_config_has_a_cpu_head_and_gpu_workers():
    config = _launcher()
    for key in ("cluster_name", "max_workers", "provider", "docker", "available_node_types", "head_node_type"):
        assert key in config, f"ray-cluster.yaml lacks {key}"
    assert config["provider"].get("type") == "aws", f"provider.type is {config['provider'].get('type')!r}, not aws"
    assert config["docker"].get("image"), "docker.image is empty: the nodes would not run the Podracer image"
    types = config["available_node_types"]
    for name, node in types.items():
        for key in ("node_config", "resources", "min_workers", "max_workers"):
            assert key in node, f"node type {name} lacks {key}"
        assert node["min_workers"] <= node["max_workers"], f"node type {name}: min_workers > max_workers"
    head = config["head_node_type"]
    assert head in types, f"head_node_type {head!r} is none of available_node_types ({sorted(types)})"
    assert types[head]["resources"].get("GPU", 0) == 0, "the head has GPUs: the template's head is a CPU node"
    assert types[head]["resources"].get("CPU") == 0, "the head advertises CPUs: pods would land next to the store"
    gpu = [n for n, t in types.items() if n != head and t["resources"].get("GPU", 0) >= 1]
    assert gpu, "no worker node type advertises a GPU"
    workers = sum(t["max_workers"] for n, t in types.items() if n != head)
    assert workers <= config["max_workers"], f"node types allow {workers} workers, max_workers {config['max_workers']}"


def test_launcher_config_validates_against_the_installed_rays_schema():
    jsonschema = pytest.importorskip("jsonschema")
    spec = importlib.util.find_spec("ray")  # the schema file, without importing Ray
    if spec is None:
        pytest.skip("ray not installed (the cluster extra)")
    schema = json.loads((Path(spec.submodule_search_locations[0]) / "autoscaler" / "ray-schema.json").read_text())
    try:
        jsonschema.validate(_launcher(), schema)
    except jsonschema.ValidationError as err:
        raise AssertionError(f"ray-cluster.yaml breaks Ray's cluster schema at {list(err.path)}: {err.message}")


# ------------------------------------------------------------------------------------- KubeRay
def test_kuberay_manifest_has_a_cpu_head_with_the_store_and_gpu_workers():
    cluster, others = _kuberay()
    assert cluster["apiVersion"] == "ray.io/v1", f"apiVersion {cluster['apiVersion']}, not KubeRay's stable ray.io/v1"
    spec = cluster["spec"]
    head = spec["headGroupSpec"]
    params = dict(head["rayStartParams"])
    for group in spec["workerGroupSpecs"]:
        params.update({f"{group['groupName']}.{k}": v for k, v in (group.get("rayStartParams") or {}).items()})
    bad = {k: v for k, v in params.items() if not isinstance(v, str)}
    assert not bad, f"rayStartParams must be strings (the CRD's type): {bad}"
    assert head["rayStartParams"].get("num-cpus") == "0", "head num-cpus is not '0': pods would land by the store"
    assert "dashboard-host" in head["rayStartParams"], "no dashboard-host on the head: ray job submit goes through it"
    head_pod = head["template"]["spec"]
    head_box = head_pod["containers"][0]
    assert head_box.get("image"), "the head container has no image"
    assert "nvidia.com/gpu" not in head_box.get("resources", {}).get("limits", {}), "the head asks for a GPU"
    claims = {d["metadata"]["name"] for d in others if d.get("kind") == "PersistentVolumeClaim"}
    volumes = {v["name"]: v for v in head_pod.get("volumes", [])}
    stores = [m for m in head_box.get("volumeMounts", [])
              if volumes.get(m["name"], {}).get("persistentVolumeClaim", {}).get("claimName") in claims]
    assert stores, f"the head mounts no PVC of this file ({sorted(claims)}): the store would die with the pod"
    workers = spec["workerGroupSpecs"]
    assert workers, "no workerGroupSpecs"
    for group in workers:
        assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"], \
            f"worker group {group['groupName']}: replicas outside [minReplicas, maxReplicas]"
    gpu = [g["groupName"] for g in workers if any("nvidia.com/gpu" in c.get("resources", {}).get("limits", {})
                                                  for c in g["template"]["spec"]["containers"])]
    assert gpu, "no worker group has nvidia.com/gpu in its limits"


# ------------------------------------------------------------------------------ all of them
def test_one_ray_version_and_one_image_everywhere():
    ray = _pin("ray")
    cluster, _ = _kuberay()
    assert cluster["spec"]["rayVersion"] == ray, \
        f"kuberay.yaml rayVersion {cluster['spec']['rayVersion']}, constraints.txt pins ray=={ray}"
    images = {"ray-cluster.yaml docker.image": _launcher()["docker"]["image"]}
    for group, pod in _pod_specs(cluster).items():
        for box in pod["containers"]:
            images[f"kuberay.yaml {group}/{box['name']}"] = box["image"]
    assert len(set(images.values())) == 1, f"the nodes would run different images: {images}"
    repo, tag = _image_tag(next(iter(images.values())))
    assert f"ray{ray}" in tag, f"image tag {tag!r} does not name Ray {ray} (ray{ray}-...): retag after a Ray bump"
    assert tag.endswith("-cuda"), f"image tag {tag!r}: the GPU workers need the cuda build"


def _documented_tournaments(path: Path) -> list[list[str]]:
    """argv of each `podracer tournament ...` in a file's comments or code blocks."""
    lines = [re.sub(r"^\s*#\s?", "", line) for line in path.read_text().splitlines()]
    joined, pending = [], ""
    for line in lines:
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
        else:
            joined.append(pending + line)
            pending = ""
    # A command starts the line or follows `ray job submit ... --`; prose mentions do neither.
    found = [re.search(r"(?:^|\s--)\s*(podracer tournament .*)", line) for line in joined]
    return [shlex.split(m[1])[1:] for m in found if m]


@pytest.mark.parametrize("name", ["ray-cluster.yaml", "kuberay.yaml", "README.md"])
def test_documented_tournament_commands_parse_and_write_the_store_on_the_head(name, capsys):
    from podracer.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["tournament", "--help"])
    flags = set(re.findall(r"--[\w-]+", capsys.readouterr().out))  # argparse would take abbreviations too
    launcher = {m.split(":")[1] for m in _launcher()["docker"].get("head_run_options", []) if m.startswith("--volume=")}
    head = _kuberay()[0]["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    kuberay = {m["mountPath"] for m in head.get("volumeMounts", [])}
    assert len(launcher) == 1 and launcher == kuberay, \
        f"the templates keep the store in different places: launcher {sorted(launcher)}, KubeRay {sorted(kuberay)}"
    store_root = launcher.pop()
    commands = _documented_tournaments(DEPLOY / name)
    assert commands, f"{name} documents no `podracer tournament ...` command"
    for argv in commands:
        try:
            args = build_parser().parse_args(argv)
        except SystemExit:
            raise AssertionError(f"{name}: `podracer {' '.join(argv)}` does not parse with today's CLI") from None
        unknown = sorted({a.split("=")[0] for a in argv if a.startswith("--")} - flags)
        assert not unknown, f"{name}: `podracer tournament` has no {unknown} (abbreviated or renamed?)"
        assert (args.backend, args.address) == ("ray", "auto"), f"{name}: on the cluster, --backend ray --address auto"
        assert args.store and args.store.startswith(store_root + "/"), \
            f"{name}: --store {args.store} is not under the head's persistent {store_root}"


def test_the_deploy_files_are_a_site_page_and_no_package_holds_them():
    """docs/deploy/ is documentation (a page of the site, the templates beside it), not package data:
    no package folder holds a Dockerfile or a cluster YAML, and no package-data pattern names them."""
    package_data = _pyproject()["tool"]["setuptools"]["package-data"]
    assert not [p for pats in package_data.values() for p in pats if "deploy" in p], package_data
    for package in ("podracer", "finance", "locomotion"):
        strays = [p.relative_to(ROOT).as_posix() for p in (ROOT / package).rglob("*")
                  if p.name == "Dockerfile" or p.name in {LAUNCHER.name, KUBERAY.name}]
        assert not strays, f"deployment files inside the package {package}: {strays} (they live in docs/deploy/)"
    site = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=_IgnoreTags)
    assert "deploy/README.md" in json.dumps(site["nav"]), "docs/deploy/README.md is not in mkdocs.yml's nav"


class _IgnoreTags(yaml.SafeLoader):
    """mkdocs.yml's !ENV tags read as plain values: only its nav is read here."""


_IgnoreTags.add_multi_constructor("!", lambda loader, suffix, node: None)


# ------------------------------------------------------------------------- secure by default
AUTH = {"RAY_AUTH_MODE": "token"}
SECRET_KEY = "auth_token"  # the key KubeRay's own samples and authOptions use in the Secret
README = DEPLOY / "README.md"
RAY_HOME = "/home/ray"  # the image's user: Ray's default token file is ~/.ray/auth_token there


def _env(container: dict) -> dict[str, dict]:
    """{name: the env entry} of a container (or autoscalerOptions)."""
    return {e["name"]: e for e in container.get("env") or []}


def _token_secret(entry: dict | None, where: str) -> str:
    """The Secret that ``entry`` (RAY_AUTH_TOKEN's env entry) reads its token from."""
    assert entry is not None, f"{where}: no RAY_AUTH_TOKEN: with RAY_AUTH_MODE=token every Ray process needs the token"
    assert "value" not in entry, f"{where}: RAY_AUTH_TOKEN written in the manifest; take it from a Secret"
    ref = entry.get("valueFrom", {}).get("secretKeyRef", {})
    assert ref.get("key") == SECRET_KEY and ref.get("name"), f"{where}: RAY_AUTH_TOKEN is not secretKeyRef ({ref})"
    return ref["name"]


def _dockerfile_env() -> dict[str, str]:
    env = {}
    for keyword, args in _instructions():
        if keyword == "ENV":
            key, sep, value = args.partition("=")
            if not sep or " " in key.strip():  # the old form, ENV KEY value
                key, _, value = args.partition(" ")
            env[key.strip()] = value.strip()
    return env


def test_the_image_turns_token_auth_on_and_holds_no_token():
    env = _dockerfile_env()
    assert env.get("RAY_AUTH_MODE") == "token", "the image does not set ENV RAY_AUTH_MODE=token"
    assert "RAY_AUTH_TOKEN" not in env, "a token baked into the image is readable by anyone who pulls it"


def test_every_kuberay_container_has_the_mode_and_the_token_from_one_secret():
    cluster, others = _kuberay()
    secrets = set()
    for group, pod in _pod_specs(cluster).items():
        for box in pod["containers"]:
            env, where = _env(box), f"kuberay.yaml {group}/{box['name']}"
            assert env.get("RAY_AUTH_MODE", {}).get("value") == "token", f"{where}: no RAY_AUTH_MODE=token"
            secrets.add(_token_secret(env.get("RAY_AUTH_TOKEN"), where))
    scaler = cluster["spec"].get("autoscalerOptions", {})
    if cluster["spec"].get("enableInTreeAutoscaling"):  # a sidecar that talks to the GCS: it needs them too
        assert _env(scaler).get("RAY_AUTH_MODE", {}).get("value") == "token", "the autoscaler has no RAY_AUTH_MODE"
        secrets.add(_token_secret(_env(scaler).get("RAY_AUTH_TOKEN"), "kuberay.yaml autoscalerOptions"))
    assert len(secrets) == 1, f"the containers read their tokens from different Secrets: {sorted(secrets)}"
    shipped = [d for d in others if d.get("kind") == "Secret"]
    assert not shipped, "kuberay.yaml ships a Secret: a token in a file that is copied around; create it with kubectl"
    created = re.findall(r"kubectl create secret generic (\S+) --from-literal=(\w+)=", README.read_text())
    assert (secrets.pop(), SECRET_KEY) in created, f"README.md creates {created}, not the Secret the manifest reads"


def test_every_launcher_node_has_the_mode_and_the_token_file():
    config = _launcher()
    options = " ".join(config["docker"].get("run_options", []))
    assert "--env=RAY_AUTH_MODE=token" in options or _dockerfile_env().get("RAY_AUTH_MODE") == "token", \
        "ray-cluster.yaml's containers run without RAY_AUTH_MODE=token"
    path = re.search(r"--env=RAY_AUTH_TOKEN_PATH=(\S+)", options)
    token_file = path[1] if path else f"{RAY_HOME}/.ray/auth_token"  # where Ray looks by default
    mounts = config.get("file_mounts") or {}
    assert token_file in mounts, f"no file_mounts entry puts the token at {token_file} on the nodes ({mounts})"
    assert "RAY_AUTH_TOKEN=" not in options and "RAY_AUTH_TOKEN=" not in LAUNCHER.read_text(), \
        "a token written in ray-cluster.yaml"
    assert "ray get-auth-token --generate" in README.read_text(), "README.md does not say how to make the token"


def _dashboard_hosts() -> list[tuple[str, str, bool]]:
    """(where, host, token auth on there) for every dashboard the templates start."""
    config, found = _launcher(), []
    launcher_auth = "--env=RAY_AUTH_MODE=token" in " ".join(config["docker"].get("run_options", []))
    for command in config.get("head_start_ray_commands", []):
        if "ray start" in command:
            host = re.search(r"--dashboard-host[= ](\S+)", command)
            found.append(("ray-cluster.yaml head", host[1] if host else "localhost", launcher_auth))
    cluster, _ = _kuberay()
    head = cluster["spec"]["headGroupSpec"]
    env = _env(head["template"]["spec"]["containers"][0])
    found.append(("kuberay.yaml head", head["rayStartParams"].get("dashboard-host", "localhost"),
                  env.get("RAY_AUTH_MODE", {}).get("value") == "token" and "RAY_AUTH_TOKEN" in env))
    return found


def test_no_dashboard_listens_on_every_interface_without_token_auth():
    hosts = _dashboard_hosts()
    assert len(hosts) == 2, f"expected one dashboard per template, found {hosts}"
    open_without_auth = [(where, host) for where, host, auth in hosts if host in ("0.0.0.0", "::") and not auth]
    assert not open_without_auth, f"dashboards (the job API: code execution) open to the network: {open_without_auth}"
    launcher = dict((where, host) for where, host, _ in hosts)["ray-cluster.yaml head"]
    assert launcher in ("127.0.0.1", "localhost"), "the launcher's dashboard is reached through `ray dashboard`'s " \
        f"SSH tunnel: bind it to the head's loopback, not {launcher}"


def test_the_readme_says_what_a_driver_needs_to_connect():
    text = README.read_text()
    for needed in ("RAY_AUTH_MODE=token", "RAY_AUTH_TOKEN", "~/.ray/auth_token", "RAY_AUTH_TOKEN_PATH",
                   "ray.init(address="):
        assert needed in text, f"README.md does not mention {needed!r}: a driver with an address alone fails"
    assert re.search(r"export RAY_AUTH_TOKEN=.*kubectl get secret podracer-ray-auth", text), \
        "README.md does not show how to take the token out of the KubeRay Secret"
