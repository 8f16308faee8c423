// Package report turns replay results into figures for papers and a
// report a person opens in one file.
//
// [Write] takes the results of [sim.Replay] or [sim.RunAll] (with their
// series: leave Config.SeriesBuckets at 0) and writes into a directory:
//
//   - summary.csv and summary.json: the result schema ([WriteCSV],
//     [WriteJSON]);
//   - timeseries.csv: every bucket of every series ([WriteTimeSeries]);
//   - for each trace, the figures [MemoryFigure] (TRACE-memory),
//     [FragmentationFigure] (TRACE-fragmentation), [PeakFigure]
//     (TRACE-peak) and [TraceFigure] (TRACE-trace), where TRACE is a
//     file-safe stem of the trace's name ([FileStems]);
//   - across traces, [OverheadFigure] (overhead) and [BreakdownFigure]
//     (breakdown: where each strategy's peak reserved memory went);
//   - index.html: the summary table and every figure, inline.
//
// Each figure is a [Figure] that can also be written on its own, in PNG,
// SVG or PDF.
//
// # Figures for a two-column paper
//
// Every figure is [ColumnWidth] (3.3 in) wide, one column of a two-column
// paper, with text at 7 pt (ticks, legends, values) and 8 pt (axis
// labels) in Liberation Sans, so that it is included at 100% and its text
// matches a 9–10 pt body. The height follows the content: a plot over time
// is 2 in below its legend, a bar chart grows with its bars. Figures carry
// no title: the paper's caption says what they show, and index.html gives
// each a title and a caption.
//
// A strategy has one colour in every figure ([StrategyColors]), from a
// colour-blind-safe palette ([Palette]: Okabe–Ito, then Paul Tol's muted
// colours); the lower bound is black, or grey where it is an area.
// Legends sit above the data area and never cover data. Bars carry their
// values.
//
// Strategies are named by their [ShortSpec] (the parameters at their
// defaults left out), the variants of a sweep by the parameters that vary
// ([Sweeps]). Both read the strategy that each result carries
// ([sim.Strategy]: its parameters, their defaults and settings) and never
// the registry, so a report of results read back from elsewhere looks the
// same without the strategies' packages.
//
// # Long traces
//
// A [sim.Series] holds at most a few thousand buckets whatever the trace's
// length, each with the smallest and largest value of its events;
// [sim.Decimate] merges them further, the same way, to at most
// [DefaultMaxPoints] for drawing. The figures draw the largest value of
// each bucket as a step held across the bucket's events, so every peak
// shows at its true height, and a 100-million-event trace draws as fast
// and as small as a short one.
//
// The trace figure's histogram of request sizes needs the trace's events,
// which a result does not keep: wrap the reader of one replay of each
// trace in a [SizeCounter] and pass its Sizes in [Options].Sizes.
//
// The report is deterministic: the same results give the same files (no
// dates, stable order), but for the timings in the summaries.
package report
