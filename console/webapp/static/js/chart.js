// A stacked bar chart drawn as inline SVG: one bar per time bucket, one
// coloured segment per series (operation class). No library: rectangles,
// lines and text computed here, scaled by the viewBox so it is responsive.

import { s, fmtInt } from './dom.js';

const M = { top: 14, right: 14, bottom: 36, left: 58 };

// niceStep returns a tick step (1, 2 or 5 times a power of ten, at least
// 1 because the values are counts) giving about `count` ticks up to max.
export function niceStep(max, count = 4) {
	if (!(max > 0)) return 1;
	const raw = max / count;
	const mag = 10 ** Math.floor(Math.log10(raw));
	const norm = raw / mag;
	const step = (norm <= 1 ? 1 : norm <= 2 ? 2 : norm <= 5 ? 5 : 10) * mag;
	return Math.max(1, step);
}

function compact(n) {
	if (n >= 1e9) return `${+(n / 1e9).toFixed(1)}G`;
	if (n >= 1e6) return `${+(n / 1e6).toFixed(1)}M`;
	if (n >= 1e4) return `${+(n / 1e3).toFixed(1)}k`;
	return fmtInt(n);
}

// stackedBars draws buckets [{label, title, values: {series: n}}] for the
// series in order (bottom first). label is the x-axis text of a bucket;
// title names it in tooltips. width is the drawing's width in CSS pixels
// (the caller measures its container, so text keeps its size on a phone).
export function stackedBars({ buckets, series, title, description, unit = 'messages', testid, width = 900 }) {
	const W = Math.max(300, Math.round(width));
	const H = Math.round(Math.min(300, Math.max(200, W * 0.32)));
	const plotW = W - M.left - M.right;
	const plotH = H - M.top - M.bottom;
	const totals = buckets.map((b) => series.reduce((sum, k) => sum + (b.values[k] || 0), 0));
	const max = Math.max(0, ...totals);
	const step = niceStep(max);
	const top = Math.max(step, Math.ceil(max / step) * step);
	const y = (v) => M.top + plotH - (v / top) * plotH;
	const slot = buckets.length ? plotW / buckets.length : plotW;
	const barW = Math.max(0.5, slot > 4 ? slot * 0.78 : slot * 0.92);

	const svg = s('svg', {
		class: 'chart', viewBox: `0 0 ${W} ${H}`, role: 'img',
		'aria-labelledby': `${testid}-title ${testid}-desc`, 'data-testid': testid,
		'data-max': max, preserveAspectRatio: 'xMidYMid meet',
	},
	s('title', { id: `${testid}-title` }, title),
	s('desc', { id: `${testid}-desc` }, description));

	const grid = s('g', { class: 'axis y-axis' });
	for (let v = 0; v <= top; v += step) {
		const yy = y(v);
		grid.append(
			s('line', { class: 'grid-line', x1: M.left, x2: W - M.right, y1: yy, y2: yy }),
			s('text', { x: M.left - 8, y: yy + 4, 'text-anchor': 'end' }, compact(v)));
	}
	grid.append(s('text', {
		x: 14, y: M.top + plotH / 2, 'text-anchor': 'middle',
		transform: `rotate(-90 14 ${M.top + plotH / 2})`,
	}, unit));
	svg.append(grid);

	const bars = s('g', { class: 'bars' });
	buckets.forEach((b, i) => {
		if (totals[i] === 0) return;
		const x = M.left + i * slot + (slot - barW) / 2;
		const g = s('g', { class: b.live ? 'bucket live' : 'bucket', 'data-index': i, 'data-total': totals[i] });
		const parts = series.filter((k) => b.values[k]).map((k) => `${k} ${fmtInt(b.values[k])}`);
		g.append(s('title', {}, `${b.title}: ${fmtInt(totals[i])} ${unit} (${parts.join(', ')})`));
		let base = 0;
		for (const k of series) {
			const v = b.values[k] || 0;
			if (!v) continue;
			const y0 = y(base);
			const y1 = y(base + v);
			g.append(s('rect', {
				class: `bar series-${k}`, x: x.toFixed(2), y: y1.toFixed(2),
				width: barW.toFixed(2), height: Math.max(0.75, y0 - y1).toFixed(2),
				'data-series': k, 'data-value': v,
			}));
			base += v;
		}
		bars.append(g);
	});
	svg.append(bars);

	const xAxis = s('g', { class: 'axis x-axis' });
	xAxis.append(s('line', { x1: M.left, x2: W - M.right, y1: M.top + plotH, y2: M.top + plotH }));
	const every = Math.max(1, Math.ceil(buckets.length / Math.max(2, Math.floor((W - M.left) / 90))));
	buckets.forEach((b, i) => {
		if (i % every !== 0) return;
		const cx = M.left + i * slot + slot / 2;
		xAxis.append(
			s('line', { x1: cx, x2: cx, y1: M.top + plotH, y2: M.top + plotH + 4 }),
			s('text', { x: cx, y: M.top + plotH + 18, 'text-anchor': 'middle' }, b.label));
	});
	svg.append(xAxis);
	return svg;
}
