/* meshplan: the book's calculator as a program (see calc/calc.h and `meshplan --help`). */
#include "calc/calc.h"

int main(int argc, char **argv) {
    return calc_main(argc, argv);
}
