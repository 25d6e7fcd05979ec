// node --import this file: runs the conformance suite on Node 20 (see hooks.mjs).
import { register } from 'node:module';

register('./hooks.mjs', import.meta.url);
