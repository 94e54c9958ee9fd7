/**
 * The CLI's main in a worker thread, one plan at a time: the harness can stop a verification
 * that does not end (a proof in this thread cannot be interrupted) by terminating the worker.
 */
import { parentPort } from 'node:worker_threads';
import { main } from '../../cli/app.js';

export interface VerifyRequest {
  readonly args: readonly string[];
}
export interface VerifyResponse {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
  readonly threw?: string;
}

parentPort?.on('message', (m: VerifyRequest) => {
  let stdout = '';
  let stderr = '';
  main([...m.args], { log: (s) => (stdout += s + '\n'), err: (s) => (stderr += s + '\n') }).then(
    (code) => parentPort?.postMessage({ code, stdout, stderr } satisfies VerifyResponse),
    // The CLI's entry point turns a rejection into exit 4 ("internal error").
    (e: unknown) => parentPort?.postMessage({ code: 4, stdout, stderr, threw: e instanceof Error ? `${e.message}\n${e.stack ?? ''}` : String(e) } satisfies VerifyResponse),
  );
});
