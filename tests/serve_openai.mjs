// tests/serve_openai.mjs: calls a running `./run MODEL -m serve` with npm's official `openai`
// package, as a user's program would, and prints what it got; tests/test_serve.py starts the
// server, writes the calls, and compares the answers with ./run's text for the same request alone.
//
//   RUN_NODE_MODULES=DIR node tests/serve_openai.mjs http://127.0.0.1:PORT/v1 < calls.json
//
// DIR is a node_modules folder that holds `openai` (npm install openai); default: tests/node_modules.
// stdin: a JSON array of {"name", "api": "chat" | "completions" | "models", "params": {...}};
// params go to client.chat.completions.create() or client.completions.create() as they are
// ("stream": true iterates the stream); "models" lists client.models.list()'s ids. stdout: a line
// {"openai_version"}, then one JSON line per call, in order:
//   {"name", "text", "finish_reason", "usage", "role", "chunks"}            (answered)
//   {"name", "ids"}                                                         (models)
//   {"name", "error": {"api_error", "class", "status", "type", "param", "code", "message"}}  (threw)
// Text a server sends as \udcXX (a byte that is not UTF-8) stays a lone surrogate here, and
// JSON.stringify writes it back as \udcXX, so the caller gets the bytes back. The client never
// retries (maxRetries 0): a failure a retry would hide is reported.
import { createRequire } from 'node:module';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { existsSync, readFileSync } from 'node:fs';

const here = dirname(fileURLToPath(import.meta.url));
const modules = process.env.RUN_NODE_MODULES || join(here, 'node_modules');
if (!existsSync(join(modules, 'openai'))) {
  console.log(JSON.stringify({ skip: `no openai package in ${modules} (npm install openai)` }));
  process.exit(0);
}
// the package from that folder, whatever folder this script is in (ES imports ignore NODE_PATH)
const require = createRequire(join(modules, 'resolve-from-here.js'));
const openai = require('openai');
const OpenAI = openai.OpenAI, APIError = openai.APIError;
const version = JSON.parse(readFileSync(join(modules, 'openai', 'package.json'), 'utf8')).version;

const baseURL = process.argv[2];
if (!baseURL) {
  console.error('usage: node serve_openai.mjs BASE_URL < calls.json');
  process.exit(2);
}
let input = '';
for await (const part of process.stdin) input += part;
const calls = JSON.parse(input);
const client = new OpenAI({ baseURL, apiKey: process.env.RUN_API_KEY || 'none', maxRetries: 0, timeout: 120000 });

console.log(JSON.stringify({ openai_version: version }));
for (const call of calls) {
  const api = call.api === 'completions' ? client.completions : client.chat.completions;
  const out = { name: call.name };
  try {
    if (call.api === 'models') {
      out.ids = [];
      for await (const model of client.models.list()) out.ids.push(model.id);
    } else if (call.params.stream) {
      const stream = await api.create(call.params);
      let text = '', finish = null, usage = null, role = null, chunks = 0;
      for await (const chunk of stream) {
        chunks++;
        if (chunk.usage) usage = chunk.usage;
        const choice = chunk.choices && chunk.choices[0];
        if (!choice) continue;
        if (call.api === 'completions') text += choice.text ?? '';
        else {
          if (role === null && choice.delta && choice.delta.role) role = choice.delta.role;
          text += (choice.delta && choice.delta.content) ?? '';
        }
        if (choice.finish_reason) finish = choice.finish_reason;
      }
      Object.assign(out, { text, finish_reason: finish, usage, role, chunks });
    } else {
      const r = await api.create(call.params);
      const choice = r.choices[0];
      const text = call.api === 'completions' ? choice.text : choice.message.content;
      Object.assign(out, { text, finish_reason: choice.finish_reason, usage: r.usage,
                           role: call.api === 'completions' ? null : choice.message.role, object: r.object });
    }
  } catch (e) {
    out.error = { api_error: e instanceof APIError, class: e && e.constructor ? e.constructor.name : typeof e,
                  status: e.status ?? null, type: e.type ?? null, param: e.param ?? null, code: e.code ?? null,
                  message: String(e && e.message) };
  }
  console.log(JSON.stringify(out));
}
