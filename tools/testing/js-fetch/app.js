// js-fetch: a standard WASI 0.2 component in JavaScript (jco componentize), whose
// fetchText reaches the network through the global fetch(), that is wasi:http.

// A result<string, string> export: the returned value is the ok case, a thrown value
// the error case.
export async function fetchText(url) {
  let response;
  try {
    response = await fetch(url);
  } catch (e) {
    throw String(e && e.message ? e.message : e);
  }
  if (!response.ok) {
    throw `status ${response.status}`;
  }
  return await response.text();
}

export function shout(text) {
  return text.toUpperCase();
}
