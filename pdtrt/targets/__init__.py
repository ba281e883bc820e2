"""The software stacks pdtrt deploys to (``reference``, ``trtllm-0.21``): their build-tool
schemas and rules, toolchains, what differs in their repositories, and how they launch."""
