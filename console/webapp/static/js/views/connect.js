// Connect: the address and key an SDK takes, ready-to-paste snippets for
// the Queen SDKs and curl, and the limits a client meets (with how to stay
// within them: batch the acknowledgements).

import { get } from '../api.js';
import { h, add, fmtInt, fmtBytes, table } from '../dom.js';

const LIMITS = [
	['max_req_per_sec', 'Requests per second', 'count'],
	['req_burst', 'Request burst', 'count'],
	['max_msgs_per_sec', 'Messages per second', 'count'],
	['msgs_burst', 'Message burst', 'count'],
	['max_batch_items', 'Items per push or transaction', 'count'],
	['max_payload_bytes', 'Max payload size', 'bytes'],
	['max_parked_pops', 'Parked consumers (long polls)', 'count'],
];

function value(v, kind) {
	if (v === null || v === undefined) return h('span', { class: 'muted' }, 'Unlimited');
	return kind === 'bytes' ? fmtBytes(v) : fmtInt(v);
}

function copyButton(text, ctx) {
	return h('button', {
		type: 'button', class: 'button secondary compact',
		onClick: async () => {
			try {
				await navigator.clipboard.writeText(text);
				ctx.notify('Copied.');
			} catch {
				ctx.notify('Copy is not allowed here: select the text instead.', { error: true });
			}
		},
	}, 'Copy');
}

export async function render(root, ctx) {
	const c = await get('/api/console/connect');
	const limits = c.limits || {};
	add(root,
		h('h1', {}, 'Connect'),
		h('section', { class: 'panel', 'aria-labelledby': 'connect-h' },
			h('h2', { id: 'connect-h' }, 'Address and key'),
			h('dl', { class: 'facts' },
				h('dt', {}, 'URL (the SDK\'s url)'), h('dd', { class: 'mono', 'data-testid': 'connect-url' }, c.url || '—'),
				h('dt', {}, 'Bearer token (the SDK\'s bearerToken)'),
				h('dd', {}, 'an API key of this cluster', ctx.isAdmin ? [' (', h('a', { href: '/console/keys' }, 'API keys'), ')'] : ' (ask an admin of the cluster)',
					'; the snippets read it from ', h('code', {}, `$${c.api_key_env}`), '.')),
			c.cluster_url && c.cluster_url !== c.url ? h('p', { 'data-testid': 'connect-own-url' },
				'The cluster\'s own address is ', h('code', {}, c.cluster_url),
				'. Node, Python and Go on Linux do not resolve *.localhost names, and a client cannot set the Host header itself, so the snippets use the address above, where the API key names the cluster.') : null,
			(c.shared_urls || []).length > 0 ? h('p', { class: 'muted' },
				'Addresses that serve every cluster, the API key naming its own: ', c.shared_urls.join(', '), '.') : null),
		h('section', { class: 'panel', 'aria-labelledby': 'connect-snippets-h' },
			h('h2', { id: 'connect-snippets-h' }, 'Snippets'),
			(c.snippets || []).map((s) => h('div', { class: 'snippet', 'data-testid': `snippet-${s.lang}` },
				h('h3', {}, s.label, ' ', copyButton(s.code, ctx)),
				h('pre', { class: 'mono' }, h('code', {}, s.code))))),
		h('section', { class: 'panel', 'aria-labelledby': 'connect-limits-h' },
			h('h2', { id: 'connect-limits-h' }, 'Limits a client meets'),
			table({
				testid: 'connect-limits',
				columns: [{ label: 'Limit' }, { label: 'Value', num: true }],
				rows: LIMITS.map(([key, label, kind]) => [label, value(limits[key], kind)]),
			}),
			h('p', {}, 'Every request counts against the request rate, acknowledgements included: ',
				'acknowledge a popped batch with one request (', h('code', {}, 'queen.ack(messages, true)'), ', ',
				h('code', {}, 'POST /api/v1/ack/batch'), ') rather than one per message. ',
				'A request over the rate is answered 429 with Retry-After; retry it after that many seconds.')),
	);
}
