/**
 * The stand-in API server as a process of its own (as a real one is): prints its
 * kubeconfig path on one line, and closes (removing its pods' containers) on SIGTERM.
 *   node --import tsx test/support/kube-standin-main.ts [namespace...]
 */
import { startKubeStandin } from './kube-standin.js';

const standin = await startKubeStandin({ namespaces: process.argv.slice(2).length ? process.argv.slice(2) : undefined });
process.stdout.write(`${standin.kubeconfigPath}\n`);
process.once('SIGTERM', () => void standin.close().then(() => process.exit(0)));
