"""A small TensorFlow training script for `jupyter vgpu run` (see vgpu-run-from-a-terminal.md).

Run inside a slice, TensorFlow is limited to that slice the moment it is imported, exactly
as in a sliced kernel.
"""

import os
import time

import numpy as np
import tensorflow as tf

print("slice:", os.environ.get("JUPYTER_VGPU_SLICE_ID"), "fraction:", os.environ.get("JUPYTER_VGPU_FRACTION"))
print("logical devices:", [d.name for d in tf.config.list_logical_devices()])

rng = np.random.default_rng(0)
x = rng.random((16384, 32), dtype=np.float32)
y = (x.sum(axis=1) > 16).astype(np.float32)
model = tf.keras.Sequential(
    [
        tf.keras.Input(shape=(32,)),
        tf.keras.layers.Dense(256, activation="relu"),
        tf.keras.layers.Dense(1, activation="sigmoid"),
    ]
)
model.compile(optimizer="adam", loss="binary_crossentropy", metrics=["accuracy"])
model.fit(x, y, epochs=int(os.environ.get("EPOCHS", "20")), batch_size=256, verbose=2)
time.sleep(float(os.environ.get("LINGER", "0")))  # keep the slice a while to look at it
