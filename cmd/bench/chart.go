package main

import (
	"encoding/xml"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// p99TargetMs is the admission latency target the chart draws its line at.
const p99TargetMs = 10

// The chart's fixed geometry: a size that GitHub shows without scaling, with
// room on the left for the latency labels and above for title and legend.
const (
	chartWidth  = 720
	chartHeight = 420
	plotLeft    = 68
	plotRight   = 700
	plotTop     = 78
	plotBottom  = 356
)

// latencySeries are the chart's lines: which quantile, how it is drawn.
var latencySeries = []struct {
	label  string
	color  string
	marker string
	value  func(loadResult) float64
}{
	{"p50", "#0072b2", "circle", func(l loadResult) float64 { return l.P50Ms }},
	{"p99", "#e69f00", "square", func(l loadResult) float64 { return l.P99Ms }},
	{"p99.9", "#cc3311", "triangle", func(l loadResult) float64 { return l.P999Ms }},
}

// smallestLatencyMs keeps a zero latency (a run too short to record one)
// off the log scale's minus infinity.
const smallestLatencyMs = 0.001

// halo keeps a label legible where it crosses a line.
const halo = `paint-order="stroke" stroke="#ffffff" stroke-width="3" stroke-linejoin="round"`

// latencyChart draws points (an open-loop sweep, in the order the load rose)
// as an SVG: achieved orders/s across, latency up a log scale, one line per
// quantile and the p99 target as a dashed line. With peak > 0 each point is
// labelled with its offered load as a share of peak, which tells the points
// apart where overload bends the line back. Points that placed no order have
// no latency and are left out; with none left the chart says so.
func latencyChart(points []loadResult, peak float64, subtitle string) []byte {
	var plotted []loadResult
	for _, p := range points {
		if p.Orders > 0 {
			plotted = append(plotted, p)
		}
	}
	var c svgCanvas
	fmt.Fprintf(&c.b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif">`+"\n",
		chartWidth, chartHeight, chartWidth, chartHeight)
	fmt.Fprintf(&c.b, `<rect x="0" y="0" width="%d" height="%d" fill="#ffffff"/>`+"\n", chartWidth, chartHeight)
	c.text(plotLeft, 26, "start", `font-size="16" font-weight="bold" fill="#222222"`, "Admission latency vs throughput (open loop)")
	c.text(plotLeft, 45, "start", `font-size="11" fill="#555555"`, subtitle)
	if len(plotted) == 0 {
		c.rect(plotLeft, plotTop, plotRight-plotLeft, plotBottom-plotTop, `fill="none" stroke="#999999"`)
		c.text((plotLeft+plotRight)/2, (plotTop+plotBottom)/2, "middle", `font-size="14" fill="#555555"`, "no data: the sweep placed no order")
		c.b.WriteString("</svg>\n")
		return []byte(c.b.String())
	}

	maxRate, minMs, maxMs := 0.0, math.Inf(1), float64(p99TargetMs)
	for _, p := range plotted {
		maxRate = max(maxRate, p.PerSecond)
		for _, s := range latencySeries {
			v := max(s.value(p), smallestLatencyMs)
			minMs, maxMs = min(minMs, v), max(maxMs, v)
		}
	}
	xTicks := linearTicks(maxRate)
	xMax := xTicks[len(xTicks)-1]
	// A quarter's headroom keeps markers off the frame and the labels above
	// the top markers out of the legend.
	yTicks := logTicks(minMs/1.25, maxMs*1.25)
	yLo, yHi := math.Log10(yTicks[0]), math.Log10(yTicks[len(yTicks)-1])
	x := func(rate float64) float64 { return plotLeft + rate/xMax*(plotRight-plotLeft) }
	y := func(latencyMs float64) float64 {
		v := math.Log10(max(latencyMs, smallestLatencyMs))
		return plotBottom - (v-yLo)/(yHi-yLo)*(plotBottom-plotTop)
	}

	// Grid and ticks. Minor log ticks (2, 5) get labels only while the axis
	// is short enough for them not to crowd; an end of the axis gets one
	// when it clears the labels beside it, so the scale's extent reads off.
	labelled := make([]bool, len(yTicks))
	for i, t := range yTicks {
		labelled[i] = isPowerOfTen(t) || yHi-yLo <= 3
	}
	clearOfLabels := func(i int) bool {
		for j, t := range yTicks {
			if labelled[j] && j != i && math.Abs(y(t)-y(yTicks[i])) < 14 {
				return false
			}
		}
		return true
	}
	for _, end := range []int{0, len(yTicks) - 1} {
		labelled[end] = labelled[end] || clearOfLabels(end)
	}
	for i, t := range yTicks {
		gridColor := "#eeeeee"
		if isPowerOfTen(t) {
			gridColor = "#d8d8d8"
		}
		c.line(plotLeft, y(t), plotRight, y(t), `stroke="`+gridColor+`"`)
		if labelled[i] {
			c.text(plotLeft-6, y(t)+4, "end", `font-size="11" fill="#333333"`, tickLabel(t))
		}
	}
	for _, t := range xTicks {
		c.line(x(t), plotTop, x(t), plotBottom, `stroke="#eeeeee"`)
		c.line(x(t), plotBottom, x(t), plotBottom+5, `stroke="#333333"`)
		c.text(x(t), plotBottom+18, "middle", `font-size="11" fill="#333333"`, tickLabel(t))
	}
	c.rect(plotLeft, plotTop, plotRight-plotLeft, plotBottom-plotTop, `fill="none" stroke="#333333"`)
	c.text((plotLeft+plotRight)/2, plotBottom+40, "middle", `font-size="12" fill="#222222"`, "achieved orders/s")
	fmt.Fprintf(&c.b, `<text x="16" y="%.1f" text-anchor="middle" font-size="12" fill="#222222" transform="rotate(-90 16 %.1f)">latency, ms (log scale)</text>`+"\n",
		float64(plotTop+plotBottom)/2, float64(plotTop+plotBottom)/2)

	target := y(p99TargetMs)
	c.line(plotLeft, target, plotRight, target, `stroke="#cc3311" stroke-width="1.5" stroke-dasharray="6 4"`)
	labelY := target - 5
	if target-plotTop < 16 {
		labelY = target + 14
	}
	c.text(plotRight-4, labelY, "end", `font-size="11" fill="#cc3311" `+halo, fmt.Sprintf("p99 target %d ms", p99TargetMs))

	for _, s := range latencySeries {
		coords := make([]string, len(plotted))
		for i, p := range plotted {
			coords[i] = fmt.Sprintf("%.1f,%.1f", x(p.PerSecond), y(s.value(p)))
		}
		fmt.Fprintf(&c.b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2" stroke-linejoin="round"/>`+"\n", strings.Join(coords, " "), s.color)
		for _, p := range plotted {
			c.marker(s.marker, x(p.PerSecond), y(s.value(p)), s.color)
		}
	}

	if peak > 0 {
		top := latencySeries[len(latencySeries)-1].value
		for _, p := range plotted {
			c.text(x(p.PerSecond), y(top(p))-8, "middle", `font-size="10" fill="#444444" `+halo, fmt.Sprintf("%.0f%%", 100*p.TargetRate/peak))
		}
		c.text(plotLeft, 68, "start", `font-size="11" fill="#555555"`, "labels: offered load, % of the closed-loop peak")
	}

	// The legend sits in a row above the plot, clear of any data.
	for i, s := range latencySeries {
		lx := float64(plotRight - 3*70 + i*70)
		c.line(lx, 64, lx+22, 64, `stroke="`+s.color+`" stroke-width="2"`)
		c.marker(s.marker, lx+11, 64, s.color)
		c.text(lx+28, 68, "start", `font-size="12" fill="#222222"`, s.label)
	}
	c.b.WriteString("</svg>\n")
	return []byte(c.b.String())
}

// svgCanvas writes SVG elements; text content is XML-escaped.
type svgCanvas struct{ b strings.Builder }

func (c *svgCanvas) text(x, y float64, anchor, attrs, content string) {
	fmt.Fprintf(&c.b, `<text x="%.1f" y="%.1f" text-anchor="%s" %s>`, x, y, anchor, attrs)
	_ = xml.EscapeText(&c.b, []byte(content)) // a strings.Builder does not fail
	c.b.WriteString("</text>\n")
}

func (c *svgCanvas) line(x1, y1, x2, y2 float64, attrs string) {
	fmt.Fprintf(&c.b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" %s/>`+"\n", x1, y1, x2, y2, attrs)
}

func (c *svgCanvas) rect(x, y, width, height float64, attrs string) {
	fmt.Fprintf(&c.b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" %s/>`+"\n", x, y, width, height, attrs)
}

// marker tells the lines apart where colour alone would not (print,
// colour-blind readers).
func (c *svgCanvas) marker(shape string, x, y float64, color string) {
	switch shape {
	case "square":
		c.rect(x-3.5, y-3.5, 7, 7, `fill="`+color+`"`)
	case "triangle":
		fmt.Fprintf(&c.b, `<polygon points="%.1f,%.1f %.1f,%.1f %.1f,%.1f" fill="%s"/>`+"\n", x, y-4.5, x+4.5, y+3.5, x-4.5, y+3.5, color)
	default:
		fmt.Fprintf(&c.b, `<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"/>`+"\n", x, y, color)
	}
}

// linearTicks are round ticks from 0 to at least top, 4 to 10 of them: the
// step is 1, 2 or 5 times a power of ten.
func linearTicks(top float64) []float64 {
	if top <= 0 {
		return []float64{0, 1}
	}
	magnitude := math.Pow10(int(math.Floor(math.Log10(top / 5))))
	step := 10 * magnitude
	for _, m := range []float64{1, 2, 5} {
		if top/(m*magnitude) <= 8 {
			step = m * magnitude
			break
		}
	}
	n := int(math.Ceil(top/step - 1e-9))
	ticks := make([]float64, n+1)
	for i := range ticks {
		ticks[i] = float64(i) * step
	}
	return ticks
}

// logTicks are the values 1, 2 and 5 times a power of ten from the last one
// at or below lo to the first one at or above hi: the axis ends on round
// values without a near-empty decade at either end.
func logTicks(lo, hi float64) []float64 {
	first := int(math.Floor(math.Log10(lo) + 1e-9))
	last := int(math.Ceil(math.Log10(hi) - 1e-9))
	var ticks []float64
	for e := first; e <= last; e++ {
		for _, m := range []float64{1, 2, 5} {
			ticks = append(ticks, m*math.Pow10(e))
		}
	}
	start, end := 0, len(ticks)-1
	for start+1 < len(ticks) && ticks[start+1] <= lo*(1+1e-9) {
		start++
	}
	for end-1 > start && ticks[end-1] >= hi*(1-1e-9) {
		end--
	}
	if end == start {
		end++
	}
	return ticks[start : end+1]
}

func isPowerOfTen(v float64) bool {
	e := math.Round(math.Log10(v))
	return math.Abs(v-math.Pow10(int(e))) <= 1e-9*v
}

// tickLabel writes a tick value the short way: 0.005, 20, 2500.
func tickLabel(v float64) string {
	s := strconv.FormatFloat(v, 'g', 4, 64)
	if strings.ContainsAny(s, "e") {
		s = strconv.FormatFloat(v, 'f', -1, 64)
	}
	return s
}

// chartFile is the admission chart's file name, beside the JSON and Markdown
// reports so the Markdown can link it relatively.
func (r report) chartFile() string {
	return "bench-" + r.Started.Format("20060102T150405Z") + "-admission.svg"
}

// admissionChart is the open-loop sweep's chart, captioned with what the
// figures depend on.
func (r report) admissionChart() []byte {
	return latencyChart(r.Sweep, r.HTTPClosed.PerSecond, fmt.Sprintf("%s, %s, %d CPUs; %s per rate, closed-loop peak %.0f orders/s",
		r.Started.Format("2006-01-02 15:04Z"), r.GoVersion, r.CPUs, r.SweepDuration, r.HTTPClosed.PerSecond))
}

// sweepMarkdown is the open-loop sweep's table and a link to its chart.
func (r report) sweepMarkdown() string {
	if len(r.Sweep) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| open-loop sweep (%s per rate) | target/s | achieved/s | p50 ms | p99 ms | p99.9 ms | errors | p99 lag to release; to a sender, ms |\n|---|---:|---:|---:|---:|---:|---:|---:|\n", r.SweepDuration)
	for _, l := range r.Sweep {
		share := ""
		if r.HTTPClosed.PerSecond > 0 {
			share = fmt.Sprintf("%.0f%% of closed-loop peak", 100*l.TargetRate/r.HTTPClosed.PerSecond)
		}
		fmt.Fprintf(&b, "| %s | %.0f | %.0f | %.2f | %.2f | %.2f | %d | %.2f; %.2f |\n", share, l.TargetRate, l.PerSecond, l.P50Ms, l.P99Ms, l.P999Ms, l.Errors, l.ReleaseP99Ms, l.TakenP99Ms)
	}
	fmt.Fprintf(&b, "\n![admission latency vs throughput](%s)\n\n", r.chartFile())
	return b.String()
}
