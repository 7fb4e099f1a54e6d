// Totals a JSON array of { id, amount } one page at a time. The state is
// bounded: two numbers and the list of page sizes seen so far.
export function totalPage(inputs, context) {
  const page = inputs.runx_page;
  const state = page.state ?? { count: 0, total: 0, pages: [] };
  for (const raw of page.records) {
    // Records arrive as their encoded JSON text, as in runx.
    const record = JSON.parse(raw);
    if (record.fail) {
      throw new Error(`record ${record.id} asked to fail`);
    }
    state.count += 1;
    state.total += record.amount;
  }
  state.pages.push(page.records.length);
  if (inputs.stop_after_pages && state.pages.length >= inputs.stop_after_pages) {
    return { runx_page: { state, done: true }, stopped: true, count: state.count, total: state.total };
  }
  if (!page.eof) {
    return { runx_page: { state } };
  }
  return {
    count: state.count,
    total: state.total,
    pages: state.pages,
    whole_digest: page.whole_digest,
    artifact_bytes: page.artifact_bytes,
    label: inputs.label ?? null,
  };
}

// Echoes the page metadata (without records) and carries the offsets seen.
export function describePages(inputs) {
  const page = inputs.runx_page;
  const seen = page.state ?? [];
  const { records, state, ...meta } = page;
  seen.push({ ...meta, record_count: records.length, input_keys: Object.keys(inputs).sort() });
  if (!page.eof) {
    return { runx_page: { state: seen } };
  }
  return { pages: seen };
}

// Breaks the intermediate-result rule on the first page.
export function leaksDomainOutput(inputs) {
  return { runx_page: { state: null }, partial: inputs.runx_page.page_index };
}

// Grows its state past the 2 MiB cap.
export function hugeState(inputs) {
  return { runx_page: { state: "s".repeat(2 * 1024 * 1024 + 1) } };
}

// Keeps a continuation state of inputs.state_bytes characters.
export function paddedState(inputs) {
  const page = inputs.runx_page;
  const state = { fill: "s".repeat(inputs.state_bytes), count: (page.state?.count ?? 0) + page.records.length };
  if (!page.eof) {
    return { runx_page: { state } };
  }
  return { count: state.count };
}

// Counts records; the state is a single number.
export function countOnly(inputs) {
  const page = inputs.runx_page;
  const count = (page.state ?? 0) + page.records.length;
  return page.eof ? { count } : { runx_page: { state: count } };
}

// Reports the largest call input seen, as JSON.stringify measures it.
export function largestInput(inputs) {
  const page = inputs.runx_page;
  const largest = Math.max(page.state ?? 0, JSON.stringify(inputs).length);
  return page.eof ? { largest, pages: page.page_index + 1 } : { runx_page: { state: largest } };
}

// Ends with an output whose key holds an unpaired surrogate.
export function surrogateKey(inputs) {
  const page = inputs.runx_page;
  return page.eof ? { ["\uD800"]: page.page_index, "\uFFFD": true } : { runx_page: { state: 0 } };
}
