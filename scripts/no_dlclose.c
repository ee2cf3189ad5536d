/* SPDX-License-Identifier: Apache-2.0 */
/* Preloaded by scripts/sanitize.sh into the MPI test processes: makes dlclose a no-op, so that
 * LeakSanitizer can still name the OpenMPI plugins (mca_*.so) that allocated what OpenMPI keeps
 * until exit, and scripts/lsan-openmpi.supp can suppress exactly those. Without it the plugins
 * are unloaded at MPI_Finalize and their leaks show as "<unknown module>". */
int dlclose(void* handle) {
  (void)handle;
  return 0;
}
