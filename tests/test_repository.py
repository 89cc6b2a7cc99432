"""What a fresh clone must give a user: scripts that run as typed."""

import ast
import os
import stat

import pytest

from helpers.processes import REPO

SCRIPTS = sorted(os.listdir(os.path.join(REPO, "scripts")))


@pytest.mark.parametrize("name", [n for n in SCRIPTS if n.endswith((".sh", ".py"))])
def test_every_script_runs_as_typed(name):
    """The docs say `scripts/reference_multi30k.sh`, not `bash ...`: each
    script needs its executable bit (from git) and an interpreter line."""
    path = os.path.join(REPO, "scripts", name)
    assert os.stat(path).st_mode & stat.S_IXUSR, f"{name}: not executable"
    with open(path, encoding="utf-8") as handle:
        assert handle.readline().startswith("#!/usr/bin/env "), name


def test_benchmarks_name_the_cpu_and_its_bf16_flags(tmp_path):
    import sys

    sys.path.insert(0, os.path.join(REPO, "scripts"))
    from bench_matmul import cpu_description

    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) "
        "Platinum 8481C\nflags\t\t: fpu avx2 avx512f "
        "avx512_bf16 amx_tile amx_bf16\n\nprocessor\t: 1\n"
    )
    assert cpu_description(str(cpuinfo)) == {
        "model": "Intel(R) Xeon(R) Platinum 8481C",
        "flags": ["amx_bf16", "amx_tile", "avx512_bf16", "avx512f", "avx2"],
    }


def test_constraints_pin_every_dependency_inside_its_range():
    """pyproject.toml declares ranges, constraints.txt the versions the
    results were produced with: each requirement (extras included) has one
    pin, and the pin satisfies the range."""
    import tomllib

    from packaging.requirements import Requirement

    with open(os.path.join(REPO, "pyproject.toml"), "rb") as handle:
        project = tomllib.load(handle)["project"]
    requirements = [Requirement(r) for r in project["dependencies"]]
    for extra in project["optional-dependencies"].values():
        requirements += [Requirement(r) for r in extra]
    with open(os.path.join(REPO, "constraints.txt"), encoding="utf-8") as handle:
        pins = dict(
            line.split("==")
            for line in handle.read().split("\n")
            if line and not line.startswith("#")
        )
    for requirement in requirements:
        if requirement.name == project["name"]:
            continue  # the test extra names the ct2 extra
        assert requirement.name in pins, f"{requirement.name}: no pin"
        assert requirement.specifier.contains(pins[requirement.name]), (
            f"{requirement.name}=={pins[requirement.name]} is outside "
            f"{requirement.specifier}"
        )


def _tf_function_calls(tree):
    """The `tf.function(...)` calls and decorators in a module's `tree`,
    bare `@tf.function` included (as a call with no keywords)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "tf.function":
            yield node.lineno, {keyword.arg: keyword.value for keyword in node.keywords}
        decorators = getattr(node, "decorator_list", [])
        for decorator in decorators:
            if ast.unparse(decorator) == "tf.function":
                yield decorator.lineno, {}


# tf.data's methods that take a function, and its argument's position:
# tf.data converts it with AutoGraph unless it is wrapped in
# do_not_convert.
_DATASET_FUNCTION_ARGUMENT = {
    "map": 0,
    "filter": 0,
    "flat_map": 0,
    "interleave": 0,
    "bucket_by_sequence_length": 0,
    "reduce": 1,
}


def _dataset_calls_converted(tree):
    """Lines of `tree` that hand tf.data a function not wrapped in
    do_not_convert (`strategy.reduce` takes no function)."""
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _DATASET_FUNCTION_ARGUMENT
            and not ast.unparse(node.func.value).endswith("strategy")
        ):
            continue
        index = _DATASET_FUNCTION_ARGUMENT[node.func.attr]
        function = node.args[index] if len(node.args) > index else None
        if not (
            isinstance(function, ast.Call)
            and ast.unparse(function.func).endswith("do_not_convert")
        ):
            yield node.lineno


def test_no_function_of_the_package_is_converted_by_autograph():
    # AutoGraph converts a function when it is first traced, from the
    # source file as it is then: a package edited or upgraded while a run
    # goes on gives it another function's lines (a finite check once read
    # "not finite" so, and refused to save). tf.data traces the functions
    # of a pipeline when it is built, a dev set's at each evaluation.
    package = os.path.join(REPO, "t2t_repro")
    converted = []
    for directory, _, names in os.walk(package):
        for name in sorted(n for n in names if n.endswith(".py")):
            path = os.path.join(directory, name)
            with open(path, encoding="utf-8") as handle:
                tree = ast.parse(handle.read())
            where = os.path.relpath(path, REPO)
            for line, keywords in _tf_function_calls(tree):
                autograph = keywords.get("autograph")
                if not (
                    isinstance(autograph, ast.Constant) and autograph.value is False
                ):
                    converted.append(f"{where}:{line}")
            converted += [f"{where}:{line}" for line in _dataset_calls_converted(tree)]
    assert converted == []
