"""What the shared launch on 2 x 2 (tests/ranks/conftest.py, rank_four) runs: plain data, read
by the ranks and by the test modules alike."""

# the examples' GPT on 2 x 2: tied layers, every objective, the flat seed (test_planning)
PLANNING_CASE = "gpt@2x2"
# the examples' VGG on 2: one group holds every variable, so one rank searches and shares its plan
ALONE_CASE = "vgg@2"
# the hook on 2 x 2 (test_hook): the VGG with SGD and momentum; the GPT's AutoDDL plans on 2 x 2
# train beside data parallel in test_memory and test_multinode
HOOK_CASES_2D = [["vgg", "default", "autoddl"]]
