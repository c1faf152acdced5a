/* meshplan: the book's calculator as a program (see train/plan.h and `meshplan --help`). */
#include "train/plan.h"

int main(int argc, char **argv) {
    return plan_main(argc, argv);
}
