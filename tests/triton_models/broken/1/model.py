class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("this model is broken on purpose")
