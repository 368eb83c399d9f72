import { createContext } from 'preact';
import { useContext } from 'preact/hooks';
import type { Session } from './types.js';

export const SessionContext = createContext<Session>({ canAct: false, showPayloads: false, version: '' });

export function useSession(): Session {
  return useContext(SessionContext);
}
