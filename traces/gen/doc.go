// Package gen generates synthetic allocation traces: workloads with known
// structure, for experiments, tests and benchmarks. The bundled traces of
// package traces are made with it.
//
// [Workloads] lists them with their parameters; [Generate] writes one to a
// [traces.Writer] and [WriteFile] to a file. The command "simulate gen" is a
// thin wrapper: each field of [Options] is one of its flags.
//
//	training  a GPT-2 style transformer trained with Adam: weights for the
//	          whole run, activations saved layer by layer and freed in
//	          reverse during backward, temporaries inside ops, gradients,
//	          optimizer state from the first step on
//	dynamic   the same with a sequence length drawn anew at every step, so
//	          that activation sizes keep changing: the case where MXNet's
//	          exact-size Naive pool keeps growing while its Round pool,
//	          with power-of-two buckets, reuses its blocks
//	random    random sizes and lifetimes, of any length, for throughput
//
// Sizes are tensor shapes times their element size, as a framework would ask
// for them; timestamps come from a simple model of a GPU's speed. Every random
// choice comes from Options.Seed, so the same options give the same bytes.
// Generators stream: they keep the live allocations of the moment, never the
// trace, so a trace of any length costs constant memory, and they write tens
// of millions of events per second to a Writer.
package gen
