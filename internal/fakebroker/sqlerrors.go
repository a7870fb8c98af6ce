package fakebroker

// pgNegativeLimitError is what the broker answers a pop with a negative
// batch: it hands the batch to its SQL as a LIMIT, and PostgreSQL's error,
// statement and PL/pgSQL context come back verbatim with HTTP 200, as its
// other database errors do (fixtures C65, C104). The exact CONTEXT lines
// were not recorded; this text has the shape PostgreSQL gives such an
// error (message, CONTEXT with the statement and the PL/pgSQL line), so
// that tests can see such internals reach the gateway.
func pgNegativeLimitError() obj {
	return obj{
		"error": "ERROR:  LIMIT must not be negative\n" +
			"CONTEXT:  SQL statement \"WITH message_data AS (SELECT m.id, m.transaction_id, m.payload FROM queen.messages m " +
			"WHERE m.partition_id = v_partition_id ORDER BY m.created_at, m.id LIMIT v_batch_size)\"\n" +
			"PL/pgSQL function queen.pop_unified_batch(jsonb) line 93 at RETURN QUERY\n",
		"success": false,
	}
}
