"""The export errors, in a module of their own so every exporter raises them without importing the others."""


class ExportError(RuntimeError):
    """An export could not be produced or did not load in its target runtime."""


class ExportVerificationError(ExportError):
    """The exported model disagrees with the Keras model beyond the tolerance.

    Attributes:
        report: the :class:`~keras_vit.export.verify.VerificationReport`.
        hint: what the model's state owes the failure, and the way out (a quantized model), or None.
    """

    def __init__(self, report, hint=None):
        self.report = report
        super().__init__(f"Export failed verification:\n{report.summary()}" + (f"\n{hint}" if hint else ""))
