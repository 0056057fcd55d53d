"""The Neuron backend: AWS Inferentia2/Trainium, models compiled for a static batch of slots (`device.NeuronDevice`)."""
