// reference.cjs writes, for each HTML page of a folder, the statements
// reference processors give for it, one N-Quads file per source:
//   NAME.jsonld.nq    jsonld.js (the JSON-LD reference processor), each
//                     <script type="application/ld+json"> block, with
//                     schema.org's context from the file given and no
//                     other remote document;
//   NAME.microdata.nq microdata-rdf-streaming-parser (W3C Microdata to RDF);
//   NAME.rdfa.nq      rdfa-streaming-parser (RDFa 1.1, HTML profile);
//   NAME.rdfa-norel.nq the same with the rel, rev and role attributes
//                     removed, which micra does not read (on ordinary pages
//                     they are link types and ARIA roles).
// Usage: node reference.cjs PAGES_DIR BASE_IRI SCHEMAORG_CONTEXT
// A page NAME.html has the base BASE_IRI + NAME.html.
'use strict';
const fs = require('fs');
const path = require('path');
const jsonld = require('jsonld');
const { Parser } = require('htmlparser2');
const { MicrodataRdfParser } = require('microdata-rdf-streaming-parser');
const { RdfaParser } = require('rdfa-streaming-parser');

const [dir, baseIRI, contextFile] = process.argv.slice(2);
const schemaContext = JSON.parse(fs.readFileSync(contextFile, 'utf8'));
const schemaURLs = new Set(['http://schema.org', 'https://schema.org', 'http://schema.org/', 'https://schema.org/',
  'http://schema.org/docs/jsonldcontext.jsonld', 'https://schema.org/docs/jsonldcontext.jsonld',
  'http://schema.org/docs/jsonldcontext.json', 'https://schema.org/docs/jsonldcontext.json']);
const documentLoader = async (url) => {
  if (schemaURLs.has(url.replace('://www.', '://'))) {
    return { contextUrl: null, documentUrl: url, document: schemaContext };
  }
  throw new Error('remote document refused: ' + url);
};

function term(t) {
  switch (t.termType) {
    case 'NamedNode': return '<' + t.value + '>';
    case 'BlankNode': return '_:' + t.value.replace(/[^A-Za-z0-9]/g, '');
    case 'Literal': {
      let s = JSON.stringify(t.value);
      if (t.language) return s + '@' + t.language;
      if (t.datatype && t.datatype.value !== 'http://www.w3.org/2001/XMLSchema#string') return s + '^^<' + t.datatype.value + '>';
      return s;
    }
    case 'DefaultGraph': return '';
  }
  throw new Error('term ' + t.termType);
}
const nquad = (q) => [term(q.subject), term(q.predicate), term(q.object), term(q.graph)].filter(Boolean).join(' ') + ' .\n';

function stream(parser, html, strip) {
  return new Promise((resolve, reject) => {
    const out = [];
    if (strip) {
      const open = parser.onTagOpen.bind(parser);
      parser.onTagOpen = (name, attrs) => { delete attrs.rel; delete attrs.rev; delete attrs.role; open(name, attrs); };
    }
    parser.on('data', (q) => out.push(nquad(q)));
    parser.on('error', reject);
    parser.on('end', () => resolve(out.join('')));
    parser.write(html);
    parser.end();
  });
}

async function jsonldBlocks(html, base) {
  const blocks = [];
  let cur = null;
  const p = new Parser({
    onopentag(name, attrs) { if (name === 'script' && (attrs.type || '').trim().toLowerCase() === 'application/ld+json') cur = []; },
    ontext(t) { if (cur) cur.push(t); },
    onclosetag(name) { if (name === 'script' && cur) { blocks.push(cur.join('')); cur = null; } },
  }, { decodeEntities: false });
  p.write(html);
  p.end();
  let out = '';
  let n = 0;
  for (const b of blocks) {
    let doc;
    try { doc = JSON.parse(b.trim()); } catch (e) { continue; }
    try {
      const nq = await jsonld.toRDF(doc, { base, documentLoader, format: 'application/n-quads' });
      // Blank node labels made unique per block.
      out += nq.replace(/_:([A-Za-z0-9]+)/g, `_:j${n}$1`);
    } catch (e) { /* refused or invalid: no statements */ }
    n++;
  }
  return out;
}

(async () => {
  for (const f of fs.readdirSync(dir).filter((f) => f.endsWith('.html')).sort()) {
    const html = fs.readFileSync(path.join(dir, f), 'utf8');
    const base = baseIRI + f;
    const name = path.join(dir, f.slice(0, -'.html'.length));
    fs.writeFileSync(name + '.jsonld.nq', await jsonldBlocks(html, base));
    fs.writeFileSync(name + '.microdata.nq', await stream(new MicrodataRdfParser({ baseIRI: base }), html, false));
    fs.writeFileSync(name + '.rdfa.nq', await stream(new RdfaParser({ baseIRI: base, contentType: 'text/html' }), html, false));
    fs.writeFileSync(name + '.rdfa-norel.nq', await stream(new RdfaParser({ baseIRI: base, contentType: 'text/html' }), html, true));
  }
})().catch((e) => { console.error(e); process.exit(1); });
