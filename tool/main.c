#include <stdio.h>
int main(void) { puts("glmtune"); return 0; }
