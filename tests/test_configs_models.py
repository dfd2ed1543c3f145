"""configs/models.yaml (issue 32 item 4): every operator at the shapes its
layers have in published networks, each entry saying where its shape comes
from, every case valid and small enough for the CPU machine."""

import re

import pytest
import yaml

from harness.base.config import expand, load_config
from harness.measuring import memory
from impls import maxpool2d
from impls.registry import get_operator
from tests.helpers import ROOT

MODELS = ROOT / "configs" / "models.yaml"

# The planes (C, H, W) the issue names per network; each must be in the sweep
# for the operators listed (k = 2 for these: they pool 2x2/2).
VGG16 = [(64, 224, 224), (128, 112, 112), (256, 56, 56), (512, 28, 28), (512, 14, 14)]
SEGNET = [(64, 360, 480), (128, 180, 240), (256, 90, 120), (512, 45, 60), (512, 23, 30)]
LENET = [(20, 24, 24), (50, 8, 8)]
ENET_POOLS = [(3, 512, 512), (16, 256, 256), (64, 128, 128)]
ENET_UNPOOLS = [(64, 128, 128), (16, 256, 256)]
RESNET_STEM_WINDOW = (3, 2, 1)  # ResNet's stem: k, s, p (torchvision's resnet.py)
# The machine `scatterbench run configs/models.yaml` is sized for (issue 32: 24 GiB of RAM).
MACHINE_BYTES = 24 * 2**30


@pytest.fixture(scope="module")
def cases():
    return expand(load_config(MODELS))


def planes(cases, op: str, form: str | None = None) -> set[tuple]:
    return {(case.params_dict["C"], case.params_dict["H"], case.params_dict["W"])
            for case in cases if case.op == op and case.params_dict.get("form") == form
            and case.params_dict["k"] == 2}


def test_every_operator_has_its_model_cases(cases):
    pools, unpools = planes(cases, "maxpool2d"), planes(cases, "maxunpool", "2d")
    for network, wanted in (("LeNet", LENET), ("VGG-16", VGG16), ("SegNet", SEGNET)):
        assert set(wanted) <= pools, f"{network} pools missing: {set(wanted) - pools}"
        assert set(wanted) <= unpools, f"{network} unpools missing: {set(wanted) - unpools}"
    assert set(ENET_POOLS) <= pools and set(ENET_UNPOOLS) <= unpools
    stems = {(c.params_dict["N"], c.params_dict["C"], c.params_dict["H"], c.params_dict["W"]) for c in cases
             if c.op == "maxpool2d" and maxpool2d.window(c.params_dict) == RESNET_STEM_WINDOW}
    assert {(32, 64, 112, 112), (64, 64, 112, 112)} <= stems, "ResNet's stem missing"
    assert {(c.mode, c.layout) for c in cases
            if c.op == "maxpool2d" and maxpool2d.window(c.params_dict) == RESNET_STEM_WINDOW} \
        == {(mode, layout) for mode in ("forward", "backward", "forward+backward")
            for layout in ("contiguous", "channels_last")}  # issue 50: the three modes, both layouts
    enet_unpools = {(c.params_dict["C"], c.params_dict["H"], c.params_dict["W"]) for c in cases
                    if c.op == "maxunpool" and c.layout == "channels_last"}
    assert enet_unpools == set(ENET_UNPOOLS)  # ENet's decoder, both layouts (issue 50)
    seed_002 = [c.params_dict for c in cases if c.op == "maxunpool" and c.params_dict["form"] == "1d"]
    assert dict(form="1d", B=2, F=3, L=4, f=5) in seed_002
    for op in ("dispersion", "dispersion_pinv"):
        sizes = {(c.params_dict["C"], c.params_dict["H"], c.params_dict["W"], c.params_dict["S"])
                 for c in cases if c.op == op}
        assert (28, 256, 256, 2) in sizes, f"{op}: no CASSI simulation case"
        assert any(C == 28 and H >= 600 and W >= 600 and S == 2 for C, H, W, S in sizes), \
            f"{op}: no real-capture (660² class) case"


def test_every_unpool_undoes_a_pool_of_the_sweep(cases):
    """An unpool's output plane is the plane its pool read: same batch,
    channels, size and window (SegNet's decoder, ENet's, or a pool's backward)."""
    keys = ("N", "C", "H", "W", "k")
    pools = {tuple(c.params_dict[key] for key in keys) for c in cases if c.op == "maxpool2d"}
    unpools = {tuple(c.params_dict[key] for key in keys) for c in cases
               if c.op == "maxunpool" and c.params_dict["form"] == "2d"}
    assert unpools and unpools <= pools, f"unpools with no pool of the same shape: {unpools - pools}"


def test_every_case_validates_and_every_strategy_runs_on_the_cpu(cases):
    config = load_config(MODELS)
    assert config.devices == ["cpu"]
    expanded = {(c.op, c.params_json) for c in cases}
    for bench in config.benchmarks:
        assert any(op == bench.op for op, _ in expanded)
    for case in cases:
        get_operator(case.op).validate(case.params_dict)
        assert get_operator(case.op).strategies[case.strategy].runs_on("cpu")


def test_every_case_fits_the_cpu_machine(cases):
    """The sweep skips what does not fit, but a model shape skipped on the
    machine it is meant for would be a shape never measured."""
    too_big = []
    for case in cases:
        op = get_operator(case.op)
        needed = memory.needed_bytes(op, op.strategies[case.strategy], case.params_dict, case.dtype)
        if not memory.fits(needed, MACHINE_BYTES):
            too_big.append(f"{case.case_id}: {needed / 2**30:.1f} GiB")
    assert not too_big, too_big


def test_every_entry_says_where_its_shape_comes_from():
    """Each benchmark is directly under a comment naming its source: code
    read ("verified"), the paper, or a seed."""
    lines = MODELS.read_text().splitlines()
    entries = [number for number, line in enumerate(lines) if re.match(r"\s*- op:", line)]
    assert len(entries) == len(yaml.safe_load(MODELS.read_text())["benchmarks"])
    for number in entries:
        comment = []
        above = number - 1
        while above >= 0 and lines[above].lstrip().startswith("#"):
            comment.insert(0, lines[above])
            above -= 1
        text = " ".join(comment).lower()
        assert comment, f"line {number + 1}: {lines[number].strip()} has no comment above it"
        assert re.search(r"verified|paper|seed", text), f"line {number + 1}: the comment names no source: {text}"
