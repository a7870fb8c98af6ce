// DOM and formatting helpers. Text always goes in as text nodes, never as
// HTML, so nothing the API returns can inject markup.

const SVG_NS = 'http://www.w3.org/2000/svg';

function build(el, attrs, children) {
	for (const [name, value] of Object.entries(attrs || {})) {
		if (value === undefined || value === null || value === false) continue;
		if (name.startsWith('on') && typeof value === 'function') {
			el.addEventListener(name.slice(2).toLowerCase(), value);
		} else if (name === 'dataset') {
			for (const [k, v] of Object.entries(value)) el.dataset[k] = String(v);
		} else if (value === true) {
			el.setAttribute(name, '');
		} else {
			el.setAttribute(name, String(value));
		}
	}
	append(el, children);
	return el;
}

function append(el, children) {
	for (const child of children.flat(Infinity)) {
		if (child === undefined || child === null || child === false) continue;
		el.append(child instanceof Node ? child : document.createTextNode(String(child)));
	}
}

// h('button', {type: 'button', onClick: fn}, 'Save') builds an HTML element.
export function h(tag, attrs, ...children) {
	return build(document.createElement(tag), attrs, children);
}

// s('rect', {x: 1}) builds an SVG element.
export function s(tag, attrs, ...children) {
	return build(document.createElementNS(SVG_NS, tag), attrs, children);
}

// add appends children to el, skipping null, undefined and false (which
// Element.append would turn into text).
export function add(el, ...children) {
	append(el, children);
	return el;
}

export function clear(el) {
	while (el.firstChild) el.firstChild.remove();
	return el;
}

const integer = new Intl.NumberFormat('en-US', { maximumFractionDigits: 0 });

export function fmtInt(n) {
	if (n === null || n === undefined) return '—';
	return integer.format(Number(n));
}

export function fmtBytes(n) {
	if (n === null || n === undefined) return '—';
	n = Number(n);
	const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
	let i = 0;
	while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i++; }
	const digits = i === 0 || Number.isInteger(n) ? 0 : 1;
	return `${n.toFixed(digits)} ${units[i]}`;
}

export function fmtDate(value) {
	if (!value) return '—';
	const d = new Date(value);
	if (Number.isNaN(d.getTime())) return String(value);
	return d.toISOString().replace('T', ' ').replace(/:\d\d(\.\d+)?Z$/, ' UTC');
}

export function timeEl(value) {
	if (!value) return h('span', { class: 'muted' }, 'never');
	return h('time', { datetime: String(value) }, fmtDate(value));
}

// A small table: columns are [{label, num}], rows are arrays of cells.
export function table({ caption, columns, rows, empty, testid, rowAttrs }) {
	const head = h('thead', {}, h('tr', {}, columns.map((c) =>
		h('th', { scope: 'col', class: c.num ? 'num' : null }, c.label))));
	const body = h('tbody', {});
	if (rows.length === 0) {
		body.append(h('tr', {}, h('td', { colspan: columns.length, class: 'empty' }, empty || 'Nothing here yet.')));
	}
	rows.forEach((cells, i) => {
		body.append(h('tr', rowAttrs ? rowAttrs(i) : {}, cells.map((cell, j) =>
			h('td', { class: columns[j].num ? 'num' : null }, cell))));
	});
	return h('div', { class: 'table-wrap' },
		h('table', { 'data-testid': testid }, caption ? h('caption', {}, caption) : null, head, body));
}
