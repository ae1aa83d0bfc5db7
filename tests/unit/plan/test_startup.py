"""How long a new engine has to answer /health (serving/plan/startup.py): the floor for the embedded default, the
weights at the class's rate twice plus the compile allowance for a large compiled model, and the plan's line."""

from __future__ import annotations

from serving.config.profile import load_profile
from serving.plan import startup
from serving.plan.images import plan_images
from serving.plan.plan import build_plan

GIB = 2**30


def test_the_embedded_default_waits_the_floor_and_says_so() -> None:
    seconds, line = startup.health_timeout(17825792, None, True)
    assert seconds == startup.FLOOR_S == 300
    assert line == (
        "the engine has 300 s to answer /health (0.02 GiB of weights at 500 MiB/s (no class rate: a SATA SSD), "
        "twice: 0 s; compile none (enforce_eager); start 60 s; 61 s, raised to the floor of 300 s)"
    )


def test_a_large_compiled_model_waits_for_its_weights_twice_and_its_compile() -> None:
    # 400 GiB at the class's 2,000 MiB/s: 204.8 s a pass, 409.6 s for two; 600 s of compile; 60 s of start.
    seconds, line = startup.health_timeout(400 * GIB, 2000.0, False)
    assert seconds == 1070
    assert "400.00 GiB of weights at 2000 MiB/s (gpu_class load_mib_s), twice: 410 s; compile 600 s" in line
    # Without a class rate, the same weights at a SATA SSD's 500 MiB/s: 1,638.4 s for two passes.
    assert startup.health_timeout(400 * GIB, None, False)[0] == 2299


def test_only_the_files_under_the_model_directory_count() -> None:
    files = [(10 * GIB, "/srv/models/served/a.safetensors"), (5 * GIB, "/srv/models/served-old/b.safetensors"),
             (1 * GIB, "/srv/models/served/sub/c.safetensors")]  # fmt: skip
    assert startup.model_bytes(files, "/srv/models/served/") == 11 * GIB


def test_the_plan_carries_the_timeout_from_the_hosts_listing() -> None:
    profile = load_profile("cpu-tiny-tp2")
    images = plan_images("vllm-cpu", "0.32.0")
    listing = f"{40 * GIB}\t{profile.model.host_path}/model.safetensors\n"
    plan = build_plan(profile.model_copy(update={"vllm": profile.vllm.model_copy(update={"enforce_eager": False})}),
                      "h1", images, {"served_files": listing})  # fmt: skip
    # 40 GiB at 500 MiB/s: 81.92 s a pass, 163.84 s for two; 600 s of compile; 60 s of start.
    assert plan.health_timeout_s == 824
    assert plan.health_timeout_line.startswith("the engine has 824 s to answer /health (40.00 GiB of weights")
