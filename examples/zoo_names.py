"""The zoo's model names, in the order issue 16 lists them (flowvision 0.2.1's alexnet through
mlp_mixer_s16_224). examples/zoo.py builds each; this module imports nothing, so that a test or
benchmark process that only launches ranks keeps OneFlow out (flowvision imports it)."""

MODELS = (
    "alexnet",
    "vgg11_bn",
    "resnet18",
    "resnet50",
    "mobilenet_v2",
    "mobilenet_v3_small",
    "efficientnet_b0",
    "densenet121",
    "shufflenet_v2_x1_0",
    "vit_tiny_patch16_224",
    "swin_tiny_patch4_window7_224",
    "convnext_tiny_224",
    "mlp_mixer_s16_224",
)
