"""The examples' GPT and VGG as planner graphs (the template builders' CPU graphs), at their
default sizes and at compare_plans' sizes: planned in tests without OneFlow and on ranks alike."""

from oneflow_autoddl.models import build_gpt, build_vgg

MODELS = {
    "gpt": lambda mesh: build_gpt(2, 128, 4, 32, 256, 8, mesh=mesh, device="cpu"),
    "gpt-512": lambda mesh: build_gpt(2, 512, 8, 32, 512, 8, mesh=mesh, device="cpu"),
    "vgg": lambda mesh: build_vgg(16, 0.125, 32, 10, 16, mesh=mesh, device="cpu"),
    "vgg-0.25": lambda mesh: build_vgg(16, 0.25, 32, 10, 16, mesh=mesh, device="cpu"),
}
MESHES = {"2": (2,), "4": (4,), "2x2": (2, 2)}
