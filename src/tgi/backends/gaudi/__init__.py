"""The Gaudi backend: Intel Gaudi HPUs through habana_frameworks, behind one seam (`device.HpuDevice`)."""
