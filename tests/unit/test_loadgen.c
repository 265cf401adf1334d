/* test_loadgen.c: (being written) */
int main(void) { return 77; }
