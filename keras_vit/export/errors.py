"""The export errors, in a module of their own so every exporter raises them without importing the others."""


class ExportError(RuntimeError):
    """An export could not be produced or did not load in its target runtime."""


class ExportVerificationError(ExportError):
    """The exported model disagrees with the Keras model beyond the tolerance.

    Attributes:
        report: the :class:`~keras_vit.export.verify.VerificationReport`.
    """

    def __init__(self, report):
        self.report = report
        super().__init__(f"Export failed verification:\n{report.summary()}")
