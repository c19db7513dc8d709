"""``TournamentConfig``: every setting of a tournament, saved as YAML in its store so that a run
can be reproduced (and resumed) from the store alone. Also the small helpers that turn env
factories into names a YAML file and a freshly spawned process can resolve, and the list of
the code a store may name without the caller's say-so (``trusted_factories``).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import numbers
import os
import pickle
import sys
from dataclasses import field
from pathlib import Path
from typing import Any, Callable, Iterable

import yaml

from podracer.agents.common import declared_number
from podracer.agents.registry import AGENTS, agent_name, import_path, resolve_agent
from podracer.envs.registry import env_factories
from podracer.plugins import load_domains
from podracer.tournament.fitness import check_fitness
from podracer.tournament.selection import SELECTIONS

__all__ = ["BACKENDS", "RUN_FIELDS", "TRUSTED_CALLABLES", "TournamentConfig", "agent_name", "callable_name",
           "callable_spec", "check_picklable", "check_trusted", "import_path", "register_factory", "resolve_agent",
           "resolve_callable", "trusted_factories"]

# Fields that may differ between two runs on the same store (resuming with a bigger budget or
# more pods is fine); any other difference means a different experiment and is refused.
RUN_FIELDS = ("pods", "generations", "entries", "time_budget", "threads_per_pod", "replace_failed", "max_failures",
              "backend", "gpus_per_pod", "address", "max_pods", "connect_timeout_s", "placement_timeout_s",
              "tensorboard", "storage_path", "storage_sync_s",
              "storage_direct_bytes")
BACKENDS = ("local", "ray")
RAY_CLIENT_REFUSED = ("address={address!r} is a Ray Client address, which the ray backend does not support: the store "
                      "lives next to the driver, so run the script on a node of the cluster (ray job submit, or on the "
                      "head node) with address='auto'")


@dataclasses.dataclass
class TournamentConfig:
    """Every setting of a tournament run, the fields of the store's ``tournament.yaml``: the agent and
    its preset, the budget (pods, generations or entries or time), selection and mutation (PBT), the
    backend and its resources, storage. ``Tournament(**config)`` takes the same names; the comment
    beside each field in ``podracer/tournament/config.py`` says what it does."""

    agent: str = "ppo"  # registry name ("ppo") or import path "package.module:Class"
    agent_config: dict[str, Any] = field(default_factory=dict)  # overrides of the agent's config fields
    preset: str | None = "auto"  # make_agent's preset: "auto" (the env's task), a task name, or None (defaults)
    pods: int | str = 4  # pods training at once, or "auto": as many as the machine or Ray cluster holds, followed
    generation_steps: int = 20_000  # env steps (summed over sub-envs) per generation, before each submission
    generations: int | None = 10  # generations per pod: the run ends when the board holds pods * generations
    entries: int | None = None  # or: the run ends when the board holds this many entries (needed with pods="auto")
    time_budget: float | None = None  # seconds; pods finish their current generation, then stop
    seed: int = 0  # each generation is seeded from (seed, ticket id)
    threads_per_pod: int | None = None  # torch threads in each pod; None: cpu_count // pods, at least 1
    selection: str = "softmax"  # "softmax" over standardised scores of the top_k, or uniform "topk"
    top_k: int = 5  # parents are drawn from the best top_k entries
    temperature: float = 1.0  # softmax temperature, 0.3-3: lower is greedier
    explore_prob: float = 0.05  # chance a generation starts from a fresh agent instead of a parent
    # A pod whose latest entry is among the best keep_top of the board's front trains on from it
    # with its hyperparameters unchanged; the others copy a parent and mutate it (PBT's truncation
    # selection: only lagging members exploit and explore). 0: every generation selects and mutates.
    # Used below the pod count (pod.keep_top: min(keep_top, pods - 1)), so that some pod always exploits.
    keep_top: int = 2
    # A pod also trains on from its latest entry when the board's best beats it by no more than
    # exploit_margin standard errors (PBT's t-test criterion); 0: off. The errors come from the
    # spread over the eval env's episodes, so an eval env of one episode (one validation account)
    # has none and only keep_top applies.
    exploit_margin: float = 2.0
    # Fresh agents other than the run's first: each mutable hparam is redrawn from its bounds
    # (log-uniform when positive) with this chance, so the population explores from generation 0
    # instead of all pods starting from one setting. 0: every fresh agent has the configured values.
    init_resample_prob: float = 0.5
    perturb_factors: tuple[float, ...] = (0.8, 1.25)  # PBT: each mutable hparam is multiplied by one of these
    resample_prob: float = 0.1  # PBT: chance a hparam is redrawn from its bounds instead
    eval_seed: int = 10_000  # validation episodes start from make_eval_env().reset(eval_seed): same for all
    # What a generation is scored on (fitness.py): None or "return", the mean eval return; "auto", the
    # eval env's task's registered default (finance's trading tasks: "windowed", the validation split
    # cut into 4 windows scored by their annualised Sharpe ratio), else the mean eval return; or a
    # registered name or {"name": ..., **settings}. A Tournament resolves "auto" when it creates its
    # store and keeps the result, so a resumed run scores as it began.
    fitness: str | dict[str, Any] | None = "auto"
    replace_failed: bool = True  # start a new pod when one dies
    # Give up (raise) when one pod has failed more than this many times in a run, counted as Ray Tune counts
    # a trial's: per pod slot (a pod and the replacements that took its place). A pod lost with its node
    # (preempted, or never started there) is replaced but not counted.
    max_failures: int = 5
    # pods="auto": train at most this many pods; on a cluster with an autoscaler the backend asks it for
    # the nodes they need (ray.autoscaler.sdk.request_resources). None: as many as the live nodes hold.
    max_pods: int | None = None
    connect_timeout_s: float = 60.0  # ray: seconds to reach the cluster at address= before a ConnectionError
    # ray: seconds a pod that no node of the cluster can host may wait for one before the run fails;
    # None: 60 without an autoscaler (no node will come), 900 with one (a new node takes minutes)
    placement_timeout_s: float | None = None
    tensorboard: bool = False  # TensorBoard event files per pod in the store's tb/pod-<id> (ray: on the head node)
    backend: str = "local"  # "local" (processes on this machine) or "ray" (Ray actors, one machine or a cluster)
    gpus_per_pod: float = 0.0  # ray: GPUs each pod asks Ray for, fractions allowed (0.25: four pods share one)
    address: str | None = None  # ray: cluster to join ("auto", "10.0.0.1:6379"); None: $RAY_ADDRESS or a local one
    make_env: dict[str, Any] | None = None  # import spec of the env factory, filled in by Tournament
    make_eval_env: dict[str, Any] | None = None
    # URI the store is mirrored to, so that it outlives the driver's node (storage.py): a path, file://,
    # s3:// (?endpoint_override=... for MinIO), gs://, or an fsspec protocol; None: the local store only
    storage_path: str | None = None
    storage_sync_s: float = 60.0  # seconds between syncs to storage_path (and one when the run ends)
    # ray + storage_path: a pod writes a checkpoint of this many bytes or more to storage_path itself, and
    # the head records only its row (benchmarks/board_throughput.py); smaller ones go through the head
    storage_direct_bytes: int = 8 * 2**20

    def __post_init__(self) -> None:
        self._check_numbers()
        self.agent_config = _plain(self.agent_config)
        self.perturb_factors = tuple(float(f) for f in self.perturb_factors)
        if self.pods != "auto" and (isinstance(self.pods, bool) or not isinstance(self.pods, int) or self.pods < 1):
            raise ValueError(f"pods must be an int >= 1 or 'auto', got {self.pods!r}")
        if self.entries is not None and self.entries < 1:  # an int: _check_numbers
            raise ValueError(f"entries must be an int >= 1 or None, got {self.entries!r}")
        if self.pods == "auto" and self.entries is None and self.time_budget is None:
            raise ValueError("pods='auto' follows the machine or cluster, so pods * generations is no budget: give "
                             "entries=N (the board entries to reach) or time_budget=seconds")
        if self.generation_steps < 1:
            raise ValueError(f"generation_steps must be >= 1, got {self.generation_steps}")
        if self.generations is None and self.time_budget is None:
            raise ValueError("give generations=... or time_budget=... (or both): the run needs a budget")
        if self.generations is not None and self.generations < 1:
            raise ValueError(f"generations must be >= 1 or None, got {self.generations}")
        budget = self.time_budget
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, numbers.Real)
                                   or not 0 < budget < math.inf):
            # Found by probing: a budget of -1 s ran, trained nothing and ended "finished" with an empty board.
            raise ValueError(f"time_budget must be a positive number of seconds or None, got {self.time_budget!r}")
        self.fitness = check_fitness(_plain(self.fitness))
        if self.selection not in SELECTIONS:
            raise ValueError(f"unknown selection {self.selection!r}; use one of {SELECTIONS}")
        if not all(0.0 <= p <= 1.0 for p in (self.explore_prob, self.resample_prob, self.init_resample_prob)):
            raise ValueError("explore_prob, resample_prob and init_resample_prob are probabilities: "
                             "use values in [0, 1]")
        if self.top_k < 1 or self.temperature <= 0 or any(f <= 0 for f in self.perturb_factors):
            raise ValueError("top_k must be >= 1, temperature > 0 and perturb_factors positive")
        if self.keep_top < 0:  # an int: _check_numbers
            raise ValueError(f"keep_top must be an int >= 0 (0: every generation mutates), got {self.keep_top!r}")
        if self.exploit_margin < 0:
            raise ValueError(f"exploit_margin must be >= 0 (0: off), got {self.exploit_margin}")
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown backend {self.backend!r}; use one of {BACKENDS}")
        if self.gpus_per_pod < 0:
            raise ValueError(f"gpus_per_pod must be >= 0, got {self.gpus_per_pod}")
        self._check_cluster_fields()
        if self.address is not None and str(self.address).startswith("ray://"):
            raise ValueError(RAY_CLIENT_REFUSED.format(address=self.address))
        if self.backend == "local" and (self.gpus_per_pod or self.address):
            raise ValueError(f"gpus_per_pod={self.gpus_per_pod} and address={self.address!r} are settings of "
                             f"backend='ray'; use backend='ray', or gpus_per_pod=0 and address=None with 'local'")

    def _check_cluster_fields(self) -> None:
        """max_pods, the Ray timeouts and tensorboard (numbers are numbers already: _check_numbers)."""
        if self.max_pods is not None and (self.max_pods < 1 or self.pods != "auto"):
            raise ValueError(f"max_pods={self.max_pods} bounds pods='auto' and must be >= 1; with pods={self.pods!r} "
                             f"the run trains that many pods: drop max_pods, or use pods='auto'")
        if self.connect_timeout_s <= 0 or (self.placement_timeout_s is not None and self.placement_timeout_s <= 0):
            raise ValueError(f"connect_timeout_s and placement_timeout_s must be > 0 (placement_timeout_s=None: the "
                             f"default), got {self.connect_timeout_s} and {self.placement_timeout_s}")
        if not isinstance(self.tensorboard, bool):
            raise ValueError(f"tensorboard must be True or False, got {self.tensorboard!r}")

    @property
    def budget(self) -> int | None:
        """Entries the finished board holds: ``entries``, else ``pods * generations``; ``None`` when
        only ``time_budget`` bounds the run."""
        if self.entries is not None:
            return self.entries
        return None if self.generations is None or self.pods == "auto" else self.pods * self.generations

    @property
    def threads(self) -> int:
        """Torch threads per pod (and CPUs asked of Ray): ``threads_per_pod``, else this machine's
        CPUs shared among the pods (1 with ``pods="auto"``: as many pods as CPUs)."""
        if self.threads_per_pod:
            return self.threads_per_pod
        return 1 if self.pods == "auto" else max(1, (os.cpu_count() or 1) // self.pods)

    def to_dict(self) -> dict[str, Any]:
        return _plain(dataclasses.asdict(self))

    def _check_numbers(self) -> None:
        """Numeric fields hold numbers (an edited tournament.yaml may hold ``"1e-3"``, which YAML reads
        as text): a named error, and numpy scalars become plain ints and floats for the YAML."""
        for f in dataclasses.fields(self):
            kind, optional = declared_number(f)
            if kind is None:
                continue
            value = getattr(self, f.name)
            if value is None and optional:
                continue
            whole = isinstance(value, numbers.Real) and float(value).is_integer()  # 1e5 is a fine step count
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or (kind == "int" and not whole):
                what = "a whole number" if kind == "int" else "a number"
                hint = " (YAML reads 1e-3 as text: write 0.001)" if isinstance(value, str) else ""
                raise ValueError(f"{f.name} must be {what}{' or None' if optional else ''}, got {value!r}: fix the "
                                 f"argument, or that line of the store's tournament.yaml{hint}")
            setattr(self, f.name, int(value) if kind == "int" else float(value))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TournamentConfig":
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"unknown TournamentConfig field(s) {unknown}; valid fields: {sorted(names)}")
        # Stores written before presets existed trained with the config defaults, and before
        # keep_top, exploit_margin and init_resample_prob every generation mutated and fresh agents
        # did not, and before fitness every generation was scored by its mean eval return: keep it so.
        return cls(**{"preset": None, "keep_top": 0, "init_resample_prob": 0.0, "exploit_margin": 0.0,
                      "fitness": None, **d})

    def to_yaml(self, path: str | Path | None = None) -> str:
        text = yaml.safe_dump(self.to_dict(), sort_keys=False)
        if path is not None:
            Path(path).write_text(text)
        return text

    @classmethod
    def from_yaml(cls, text_or_path: str | Path) -> "TournamentConfig":
        """From YAML text or a path to a YAML file. Text that is not YAML, or YAML that is not a mapping
        of fields (an edited store's tournament.yaml), is a ValueError naming the file."""
        source, where = text_or_path, "the YAML text"
        if isinstance(source, Path) or (isinstance(source, str) and "\n" not in source and Path(source).exists()):
            source, where = Path(source).read_text(), str(source)
        try:
            data = yaml.safe_load(source)
        except yaml.YAMLError as err:  # found by probing: a bare ParserError that named neither the file nor a fix
            raise ValueError(f"{where} is not valid YAML ({' '.join(str(err).split())}); fix that line, or restore "
                             f"the file from a copy of the store") from None
        if not isinstance(data, dict):
            raise ValueError(f"{where} holds a {type(data).__name__}, not the mapping of TournamentConfig fields a "
                             f"tournament.yaml is; restore the file from a copy of the store")
        return cls.from_dict(data)

    def differences(self, other: "TournamentConfig") -> list[str]:
        """Fields outside ``RUN_FIELDS`` whose values differ (an env spec unknown on either side is skipped)."""
        a, b = self.to_dict(), other.to_dict()
        a["agent"], b["agent"] = _canonical_agent(a["agent"]), _canonical_agent(b["agent"])
        diff = []
        for k in a:
            if k in RUN_FIELDS or (k in ("make_env", "make_eval_env") and (a[k] is None or b[k] is None)):
                continue
            if a[k] != b[k]:
                diff.append(f"{k}: {a[k]!r} != {b[k]!r}")
        return diff


def _plain(x: Any) -> Any:
    """Tuples to lists, recursively: YAML-safe and equal after a round trip."""
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x


# ---------------------------------------------------------------------------- env factories
def check_picklable(fn: Callable[[], Any], what: str) -> None:
    """Raise a ValueError that says how to fix it unless a spawned process can receive ``fn``."""
    if not callable(fn):
        raise TypeError(f"{what} must be a callable returning an env, got {type(fn).__name__}")
    target = fn.func if isinstance(fn, functools.partial) else fn
    qualname = getattr(target, "__qualname__", type(target).__name__)
    fix = (f"define {what} as a module-level function in a .py file, or use functools.partial, e.g. "
           f"functools.partial(podracer.make_env, 'pendulum', num_envs=64)")
    if "<lambda>" in qualname or "<locals>" in qualname:
        raise ValueError(f"{what} ({qualname}) cannot be sent to the pod processes (they start with spawn and "
                         f"receive it pickled); {fix}")
    main = sys.modules.get("__main__")
    if getattr(target, "__module__", None) == "__main__" and not hasattr(main, "__file__"):
        raise ValueError(f"{what} ({qualname}) is defined in a notebook or interactive session, which the "
                         f"spawned pod processes cannot import; {fix}")
    try:
        pickle.loads(pickle.dumps(fn))
    except Exception as e:
        raise ValueError(f"{what} is not picklable ({type(e).__name__}: {e}); {fix}") from e


def callable_spec(fn: Callable[..., Any]) -> dict[str, Any] | None:
    """``{"function": "module:qualname", "args": [...], "kwargs": {...}}`` for a module-level
    function or a ``functools.partial`` of one with YAML-safe arguments; ``None`` otherwise."""
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    if isinstance(fn, functools.partial):
        args, kwargs, fn = list(fn.args), dict(fn.keywords), fn.func
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if not module or module == "__main__" or "<" in qualname or inspect.ismethod(fn):
        return None  # a bound method's instance cannot be written down by name
    spec = {"function": f"{module}:{qualname}", "args": _plain(args), "kwargs": _plain(kwargs)}
    try:
        yaml.safe_dump(spec)
    except yaml.YAMLError:
        return None
    return spec


def resolve_callable(spec: dict[str, Any]) -> Callable[[], Any]:
    """Inverse of ``callable_spec``."""
    return functools.partial(import_path(spec["function"]), *spec.get("args", []), **spec.get("kwargs", {}))


# ---------------------------------------------------------------------------- what a store may name
# A store's tournament.yaml names code that a resumed run calls: the env factories, and the agent
# class when it is an import path. Anyone who can write the store can edit that file (to
# "posix:system", say), so Tournament.from_store treats it like a checkpoint, as untrusted input:
# the factories below and the registry's agents run freely; anything else only when the caller
# allows it by name. Keep this the one list.
# The core's own factories; domains add theirs with register_factory when imported, and every
# factory given to podracer.register_env is trusted too (it is code the installed packages run).
TRUSTED_CALLABLES: frozenset[str] = frozenset({
    "podracer.envs:make_env",  # podracer.make_env: a registered env or a registered gymnasium id
    "podracer:make_env",
    "podracer.envs.registry:make_env",
    "podracer.envs.pendulum:PendulumVecEnv",
    "podracer.envs.cartpole:CartPoleVecEnv",
})
_REGISTERED_FACTORIES: set[str] = set()


def register_factory(factory: str | Callable[..., Any]) -> None:
    """Trust ``factory`` (a function or class, or its ``"module:qualname"``) as an env factory a
    store's tournament.yaml may name: a domain package calls this when imported for the factories
    its tournaments store (the trading demo's ``train_env``, say). Register only code that builds
    envs from plain arguments; a store can pass it any arguments."""
    _REGISTERED_FACTORIES.add(callable_name(factory))


def trusted_factories(load: bool = True) -> frozenset[str]:
    """Every env factory a store may name without ``allow=``: the core's, the registered envs'
    and those registered by the installed domains (imported here first unless ``load=False``)."""
    if load:
        load_domains()
    return TRUSTED_CALLABLES | _REGISTERED_FACTORIES | {callable_name(f) for f in env_factories()}


def callable_name(obj: str | Callable[..., Any]) -> str:
    """``"module:qualname"`` of a function, class or ``functools.partial`` (a string is returned as is)."""
    if isinstance(obj, str):
        return obj
    if isinstance(obj, functools.partial):
        obj = obj.func
    return f"{getattr(obj, '__module__', '?')}:{getattr(obj, '__qualname__', type(obj).__qualname__)}"


def _canonical_agent(name: str) -> str:
    """A registry agent's name whichever way it is written ("PPO", "podracer.agents.ppo:PPO"), without importing."""
    if ":" not in name:
        return name.lower()
    return next((key for key, (target, *_rest) in AGENTS.items() if target == name), name)


def _trusted_agent(name: str) -> bool:
    return ":" not in name or name in {target for target, *_rest in AGENTS.values()}


def check_trusted(what: str, name: str, source: str | Path, allow: Iterable[str | Callable[..., Any]] = ()) -> None:
    """Refuse to run ``name`` (``"module:qualname"``), which ``source`` names as ``what``, unless
    it is trusted (``TRUSTED_CALLABLES``; for ``what="agent"`` a registry agent) or in ``allow``."""
    allowed = {callable_name(a) for a in allow}
    if what == "agent":
        trusted = _trusted_agent(name)
    else:  # import the installed domains only when the name is not known yet
        trusted = name in trusted_factories(load=False) or name in trusted_factories()
    if trusted or name in allowed:
        return
    source = Path(source)
    kind = "agent class" if what == "agent" else "env factory"
    raise ValueError(
        f"{source} names {what}: {name!r}, which is not one of Podracer's trusted env factories or registered "
        f"agents, so it was not run. A store's tournament.yaml is untrusted input, like a checkpoint: anyone who "
        f"can write the store can change it to any callable ('posix:system' included). If {name!r} is your own "
        f"{kind} and you trust this store, allow it by name: Tournament.from_store({str(source.parent)!r}, "
        f"allow=[{name!r}])" + ("" if what == "agent" else f", or pass {what}=... to from_store yourself"))
