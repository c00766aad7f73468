"""What this machine runs natively: the bottom floor of keras_vit, importing nothing else from it.

One module per job:

* :mod:`~keras_vit.hardware.cpu` -- the processor and its flags (``/proc/cpuinfo``).
* :mod:`~keras_vit.hardware.gpu` -- the CUDA GPUs the Keras backend sees.
* :mod:`~keras_vit.hardware.precision` -- the mixed-precision policy the hardware runs natively.
* :mod:`~keras_vit.hardware.onednn` -- whether TensorFlow runs its oneDNN kernels, and the
  environment the ``keras-vit`` command sets so that it does.
* :mod:`~keras_vit.hardware.terminal` -- whether output goes to a terminal.
* :mod:`~keras_vit.hardware.report` -- the machine lines of ``keras-vit info``.

Callers import the submodule they need (``from keras_vit.hardware import cpu``);
this package re-exports nothing, so that a test replacing ``cpu.cpu_info``
replaces it for every module that asks.
"""
