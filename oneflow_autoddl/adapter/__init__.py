"""The only part of oneflow_autoddl that imports OneFlow: Job <-> IR, write-back, nn.Graph hook."""
