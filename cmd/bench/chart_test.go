package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// svgElement is one parsed element of a chart: its name, attributes and the
// text directly inside it.
type svgElement struct {
	name  string
	attrs map[string]string
	text  string
}

// parseSVG decodes a chart as XML, failing the test when it is not
// well-formed or its root is not an svg element.
func parseSVG(t testing.TB, data []byte) []svgElement {
	t.Helper()
	decoder := xml.NewDecoder(bytes.NewReader(data))
	var elements []svgElement
	var open []int
	for {
		token, err := decoder.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("chart is not well-formed XML: %v\n%s", err, data)
		}
		switch token := token.(type) {
		case xml.StartElement:
			e := svgElement{name: token.Name.Local, attrs: map[string]string{}}
			for _, a := range token.Attr {
				e.attrs[a.Name.Local] = a.Value
			}
			elements = append(elements, e)
			open = append(open, len(elements)-1)
		case xml.EndElement:
			open = open[:len(open)-1]
		case xml.CharData:
			if len(open) > 0 {
				elements[open[len(open)-1]].text += string(token)
			}
		}
	}
	if len(elements) == 0 || elements[0].name != "svg" {
		t.Fatalf("chart's root is not <svg>:\n%s", data)
	}
	return elements
}

func number(t testing.TB, s string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("coordinate %q: %v", s, err)
	}
	return v
}

// pointList parses a polyline's or polygon's points attribute.
func pointList(t testing.TB, s string) [][2]float64 {
	t.Helper()
	var points [][2]float64
	for _, pair := range strings.Fields(s) {
		x, y, ok := strings.Cut(pair, ",")
		if !ok {
			t.Fatalf("point %q is not x,y", pair)
		}
		points = append(points, [2]float64{number(t, x), number(t, y)})
	}
	return points
}

// coordinates are every x,y an element places something at.
func coordinates(t testing.TB, e svgElement) [][2]float64 {
	t.Helper()
	pairs := map[string][][2]string{
		"line":   {{"x1", "y1"}, {"x2", "y2"}},
		"rect":   {{"x", "y"}},
		"circle": {{"cx", "cy"}},
		"text":   {{"x", "y"}},
	}[e.name]
	var points [][2]float64
	for _, p := range pairs {
		points = append(points, [2]float64{number(t, e.attrs[p[0]]), number(t, e.attrs[p[1]])})
	}
	if e.name == "rect" {
		points = append(points, [2]float64{points[0][0] + number(t, e.attrs["width"]), points[0][1] + number(t, e.attrs["height"])})
	}
	if e.name == "polyline" || e.name == "polygon" {
		points = pointList(t, e.attrs["points"])
	}
	return points
}

func sweepPoint(perSecond, p50, p99, p999 float64) loadResult {
	return loadResult{TargetRate: perSecond, Orders: int64(perSecond * 4), PerSecond: perSecond, P50Ms: p50, P99Ms: p99, P999Ms: p999}
}

func TestLatencyChart(t *testing.T) {
	for _, tc := range []struct {
		name     string
		points   []loadResult
		subtitle string
		// lines is how many quantile lines the chart draws: 0 means the
		// "no data" chart.
		lines int
	}{
		{name: "no points", points: nil, lines: 0},
		{name: "no point placed an order", points: []loadResult{{TargetRate: 100}, {TargetRate: 200}}, lines: 0},
		{name: "one point", points: []loadResult{sweepPoint(500, 1.2, 3.4, 5.6)}, lines: 3},
		{name: "rising sweep", lines: 3, points: []loadResult{
			sweepPoint(300, 0.8, 1.9, 3.1), sweepPoint(750, 0.9, 2.2, 4.0), sweepPoint(1500, 1.1, 3.5, 7.5),
			sweepPoint(2250, 1.6, 6.8, 14), sweepPoint(2700, 2.9, 18, 31), sweepPoint(2950, 40, 380, 520), sweepPoint(2990, 900, 1800, 2100),
		}},
		{name: "zero latency and an unplaced point", lines: 3, points: []loadResult{sweepPoint(10, 0, 0, 0.05), {TargetRate: 20}, sweepPoint(30, 0.02, 0.1, 0.2)}},
		{name: "subtitle needing escapes", subtitle: `<go1.26 & "2" CPUs>`, lines: 3, points: []loadResult{sweepPoint(100, 1, 2, 3)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			elements := parseSVG(t, latencyChart(tc.points, 1000, tc.subtitle))
			root := elements[0]
			if root.attrs["viewBox"] != "0 0 720 420" {
				t.Fatalf("viewBox %q, want 0 0 720 420", root.attrs["viewBox"])
			}
			var polylines []svgElement
			var texts []string
			for _, e := range elements[1:] {
				for _, p := range coordinates(t, e) {
					if p[0] < 0 || p[0] > chartWidth || p[1] < 0 || p[1] > chartHeight {
						t.Errorf("<%s> at %v lies outside the viewBox", e.name, p)
					}
				}
				switch e.name {
				case "polyline":
					polylines = append(polylines, e)
				case "text":
					texts = append(texts, e.text)
				}
			}
			if len(polylines) != tc.lines {
				t.Fatalf("%d polylines, want %d", len(polylines), tc.lines)
			}
			if tc.subtitle != "" && !slices.Contains(texts, tc.subtitle) {
				t.Errorf("subtitle %q not among the texts %q", tc.subtitle, texts)
			}
			if tc.lines == 0 {
				if !slices.ContainsFunc(texts, func(s string) bool { return strings.Contains(s, "no data") }) {
					t.Errorf("no-data chart does not say so: %q", texts)
				}
				return
			}
			// Each point's p50 ≤ p99 ≤ p99.9 must come out top-down in the
			// same order, and the x order must follow the achieved rates.
			var lines [][][2]float64
			for _, p := range polylines {
				lines = append(lines, pointList(t, p.attrs["points"]))
			}
			for i := range lines[0] {
				if !(lines[0][i][1] >= lines[1][i][1] && lines[1][i][1] >= lines[2][i][1]) {
					t.Errorf("point %d: y of p50, p99, p99.9 = %v, %v, %v; want falling (higher latency drawn higher)",
						i, lines[0][i][1], lines[1][i][1], lines[2][i][1])
				}
				if i > 0 && lines[0][i][0] < lines[0][i-1][0] {
					t.Errorf("point %d: x %v left of the previous point's %v though its rate is higher", i, lines[0][i][0], lines[0][i-1][0])
				}
			}
			if !slices.Contains(texts, "p99 target 10 ms") {
				t.Errorf("no p99 target label among %q", texts)
			}
			// The chart is drawn with a peak of 1000/s, so a point offered
			// 300/s is labelled 30%.
			offered := fmt.Sprintf("%.0f%%", tc.points[len(tc.points)-1].TargetRate/10)
			for _, want := range []string{"p50", "p99", "p99.9", "achieved orders/s", "latency, ms (log scale)", offered} {
				if !slices.Contains(texts, want) {
					t.Errorf("no %q label among %q", want, texts)
				}
			}
		})
	}
}

// TestLatencyChartTargetLine checks the log scale end to end: the target line
// sits where 10 ms falls between the axis' decade ticks.
func TestLatencyChartTargetLine(t *testing.T) {
	// Latencies from 0.125 to 80 ms, with the chart's quarter of headroom,
	// make an axis from 0.1 to 100 ms: three decades, so 10 ms is two thirds
	// of the way up.
	elements := parseSVG(t, latencyChart([]loadResult{sweepPoint(100, 0.125, 5, 80)}, 0, ""))
	var targetY float64
	for _, e := range elements {
		if e.name == "line" && e.attrs["stroke-dasharray"] != "" {
			targetY = number(t, e.attrs["y1"])
		}
	}
	want := plotBottom - 2.0/3*(plotBottom-plotTop)
	if math.Abs(targetY-want) > 0.1 {
		t.Errorf("target line at y %v, want %v", targetY, want)
	}
}

func TestLogTicks(t *testing.T) {
	for _, tc := range []struct {
		lo, hi float64
		want   []float64
	}{
		{0.5, 30, []float64{0.5, 1, 2, 5, 10, 20, 50}},
		{1, 10, []float64{1, 2, 5, 10}},
		{2, 3, []float64{2, 5}},
		{10, 10, []float64{10, 20}},
		{0.001, 0.01, []float64{0.001, 0.002, 0.005, 0.01}},
		{0.0015, 0.0099, []float64{0.001, 0.002, 0.005, 0.01}},
		{0.8, 1200, []float64{0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000}},
	} {
		got := logTicks(tc.lo, tc.hi)
		if len(got) != len(tc.want) {
			t.Errorf("logTicks(%v, %v) = %v, want %v", tc.lo, tc.hi, got, tc.want)
			continue
		}
		for i := range got {
			if math.Abs(got[i]-tc.want[i]) > 1e-12*tc.want[i] {
				t.Errorf("logTicks(%v, %v) = %v, want %v", tc.lo, tc.hi, got, tc.want)
				break
			}
		}
	}
}

func TestLinearTicks(t *testing.T) {
	for _, tc := range []struct {
		top  float64
		want []float64
	}{
		{3000, []float64{0, 500, 1000, 1500, 2000, 2500, 3000}},
		{3001, []float64{0, 500, 1000, 1500, 2000, 2500, 3000, 3500}},
		{95, []float64{0, 20, 40, 60, 80, 100}},
		{7, []float64{0, 1, 2, 3, 4, 5, 6, 7}},
		{0, []float64{0, 1}},
	} {
		got := linearTicks(tc.top)
		if !slices.Equal(got, tc.want) {
			t.Errorf("linearTicks(%v) = %v, want %v", tc.top, got, tc.want)
		}
	}
}

func TestTickLabel(t *testing.T) {
	for v, want := range map[float64]string{0.001: "0.001", 0.2: "0.2", 5: "5", 2500: "2500", 20000: "20000", 3 * 0.1: "0.3"} {
		if got := tickLabel(v); got != want {
			t.Errorf("tickLabel(%v) = %q, want %q", v, got, want)
		}
	}
}
